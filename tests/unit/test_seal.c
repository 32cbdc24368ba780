/*
 * test_seal.c - sealed sessions' messages (common/seal.h), checked against
 * libsodium called directly here with the nonces and additional data that
 * docs/security.md states, so the format cannot drift unnoticed:
 *   - a payload of several chunks seals to exactly the chunks and tags the
 *     stated construction gives, for AES-256-GCM and XChaCha20-Poly1305;
 *   - the other end opens it; the same end, a replay, an older counter, a
 *     changed byte anywhere (seal frame, header, any chunk, any tag),
 *     chunks swapped, a chunk count that does not match, another session's
 *     key: each refused (ZPS_ESEAL), and a refusal accepts no counter;
 *   - a message without a payload, and an empty payload.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "error.h"
#include "seal.h"

#define LEN (2 * ZPS_SEAL_CHUNK_BYTES + 1000) /* three chunks, the last short */
#define HDR 40

typedef struct pair {
    zps_seal_t server, client;
} pair_t;

static void make_pair(pair_t *p, enum zps_seal_cipher cipher)
{
    zps_seal_new(&p->server, cipher);
    zps_seal_join(&p->client, p->server.id, p->server.key, cipher);
}

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31 + seed);
    return b;
}

/* The reference: part `index` sealed by hand, as docs/security.md says. */
static void reference(enum zps_seal_cipher cipher, const unsigned char *key, unsigned char dir,
                      size_t index, uint64_t counter, const unsigned char *ad,
                      const unsigned char *m, size_t n, unsigned char *c, unsigned char *tag)
{
    unsigned char nonce[24] = {0};
    nonce[0] = dir;
    nonce[1] = (unsigned char)index;
    nonce[2] = (unsigned char)(index >> 8);
    nonce[3] = (unsigned char)(index >> 16);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (unsigned char)(counter >> (8 * i));
    unsigned long long tl;
    if (cipher == ZPS_SEAL_AES256GCM)
        crypto_aead_aes256gcm_encrypt_detached(c, tag, &tl, m, n, ad, 32, NULL, nonce, key);
    else
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(c, tag, &tl, m, n, ad, 32, NULL, nonce,
                                                            key);
}

typedef struct sealed {
    unsigned char frame[ZPS_SEAL_FRAME_BYTES];
    unsigned char header[HDR];
    unsigned char *payload;
    unsigned char *tags;
    size_t len, chunks;
} sealed_t;

static void seal_one(zps_seal_t *from, sealed_t *m, size_t len, unsigned seed)
{
    memset(m, 0, sizeof(*m));
    unsigned char *h = pattern(HDR, seed), *p = pattern(len, seed + 1);
    memcpy(m->header, h, HDR);
    m->len = len;
    m->chunks = zps_seal_chunks(true, len);
    m->payload = malloc(len ? len : 1);
    m->tags = malloc(m->chunks * ZPS_SEAL_TAG_BYTES);
    zps_seal_message(from, m->frame, m->header, HDR, true, m->payload, p, len, m->tags);
    free(h);
    free(p);
}

static sealed_t copy_of(const sealed_t *m)
{
    sealed_t c = *m;
    c.payload = malloc(m->len ? m->len : 1);
    memcpy(c.payload, m->payload, m->len);
    c.tags = malloc(m->chunks * ZPS_SEAL_TAG_BYTES);
    memcpy(c.tags, m->tags, m->chunks * ZPS_SEAL_TAG_BYTES);
    return c;
}

static void drop(sealed_t *m)
{
    free(m->payload);
    free(m->tags);
}

static int open_one(zps_seal_t *at, sealed_t *m)
{
    return zps_seal_open(at, m->frame, m->header, HDR, true, m->payload, m->len, m->tags,
                         m->chunks * ZPS_SEAL_TAG_BYTES);
}

static void check_cipher(enum zps_seal_cipher cipher)
{
    pair_t p;
    make_pair(&p, cipher);
    sealed_t m;
    seal_one(&p.client, &m, LEN, 7);
    assert_int_equal(m.chunks, 3);

    /* Exactly the stated construction: the seal frame's fields, then every
     * part against libsodium called here. */
    assert_memory_equal(m.frame, "zpsS", 4);
    assert_memory_equal(m.frame + 4, p.server.id, ZPS_SEAL_ID_BYTES);
    assert_int_equal(m.frame[20], 1); /* the first counter is 1 */
    assert_int_equal(m.frame[28], 3);
    assert_int_equal(m.frame[29], 3);
    unsigned char *h = pattern(HDR, 7), *pl = pattern(LEN, 8);
    unsigned char c[ZPS_SEAL_CHUNK_BYTES], tag[16];
    reference(cipher, p.server.key, 'C', 0, 1, m.frame, h, HDR, c, tag);
    assert_memory_equal(c, m.header, HDR);
    assert_memory_equal(tag, m.frame + 32, 16);
    for (size_t i = 0; i < 3; i++) {
        size_t off = i * ZPS_SEAL_CHUNK_BYTES;
        size_t n = LEN - off < ZPS_SEAL_CHUNK_BYTES ? LEN - off : ZPS_SEAL_CHUNK_BYTES;
        reference(cipher, p.server.key, 'C', i + 1, 1, m.frame, pl + off, n, c, tag);
        assert_memory_equal(c, m.payload + off, n);
        assert_memory_equal(tag, m.tags + 16 * i, 16);
    }

    /* The sender cannot open its own direction. */
    sealed_t own = copy_of(&m);
    assert_int_equal(open_one(&p.client, &own), ZPS_ESEAL);
    drop(&own);

    /* Every changed byte is refused, and refusals accept nothing. */
    for (int where = 0; where < 5; where++) {
        sealed_t t = copy_of(&m);
        if (where == 0)
            t.frame[22] ^= 1; /* the counter */
        else if (where == 1)
            t.header[3] ^= 0x80;
        else if (where == 2)
            t.payload[ZPS_SEAL_CHUNK_BYTES + 5] ^= 1;
        else if (where == 3)
            t.tags[2 * 16 + 15] ^= 1;
        else
            t.frame[33] ^= 1; /* the header's tag */
        assert_int_equal(open_one(&p.server, &t), ZPS_ESEAL);
        drop(&t);
    }
    /* Chunks swapped (with their tags): refused. */
    sealed_t sw = copy_of(&m);
    memcpy(sw.payload, m.payload + ZPS_SEAL_CHUNK_BYTES, ZPS_SEAL_CHUNK_BYTES);
    memcpy(sw.payload + ZPS_SEAL_CHUNK_BYTES, m.payload, ZPS_SEAL_CHUNK_BYTES);
    memcpy(sw.tags, m.tags + 16, 16);
    memcpy(sw.tags + 16, m.tags, 16);
    assert_int_equal(open_one(&p.server, &sw), ZPS_ESEAL);
    drop(&sw);
    /* The last chunk cut off: the count does not match. */
    sealed_t cut = copy_of(&m);
    cut.len = 2 * ZPS_SEAL_CHUNK_BYTES;
    assert_int_equal(zps_seal_open(&p.server, cut.frame, cut.header, HDR, true, cut.payload,
                                   cut.len, cut.tags, 2 * 16),
                     ZPS_ESEAL);
    drop(&cut);
    assert_int_equal(p.server.accepted, 0);

    /* The genuine message opens to what was sealed. */
    sealed_t ok = copy_of(&m);
    assert_int_equal(open_one(&p.server, &ok), 0);
    assert_memory_equal(ok.header, h, HDR);
    assert_memory_equal(ok.payload, pl, LEN);
    assert_int_equal(p.server.accepted, 1);
    drop(&ok);
    /* Again: a replay. */
    sealed_t again = copy_of(&m);
    assert_int_equal(open_one(&p.server, &again), ZPS_ESEAL);
    drop(&again);

    /* Counters must grow: message 3 opens, then message 2 is refused. */
    sealed_t m2, m3;
    seal_one(&p.client, &m2, 100, 1);
    seal_one(&p.client, &m3, 100, 2);
    assert_int_equal(open_one(&p.server, &m3), 0);
    assert_int_equal(open_one(&p.server, &m2), ZPS_ESEAL);
    drop(&m2);
    drop(&m3);

    /* The other direction, an empty payload, and no payload. */
    sealed_t back;
    seal_one(&p.server, &back, 0, 3);
    assert_int_equal(back.chunks, 1);
    assert_int_equal(open_one(&p.client, &back), 0);
    drop(&back);
    unsigned char frame[ZPS_SEAL_FRAME_BYTES], hdr[HDR];
    memcpy(hdr, h, HDR);
    zps_seal_message(&p.server, frame, hdr, HDR, false, NULL, NULL, 0, NULL);
    assert_int_equal(frame[28], 2);
    assert_int_equal(zps_seal_open(&p.client, frame, hdr, HDR, false, NULL, 0, NULL, 0), 0);
    assert_memory_equal(hdr, h, HDR);

    /* Another session's key opens nothing. */
    pair_t q;
    make_pair(&q, cipher);
    memcpy(q.server.id, p.server.id, ZPS_SEAL_ID_BYTES);
    sealed_t other;
    seal_one(&p.client, &other, 500, 4);
    assert_int_equal(open_one(&q.server, &other), ZPS_ESEAL);
    drop(&other);

    free(h);
    free(pl);
    drop(&m);
}

static void test_aes256gcm(void **state)
{
    (void)state;
    if (!zps_seal_cipher_available(ZPS_SEAL_AES256GCM)) {
        print_message("skipped: this CPU has no AES-NI\n");
        skip();
    }
    check_cipher(ZPS_SEAL_AES256GCM);
}

static void test_xchacha20poly1305(void **state)
{
    (void)state;
    assert_true(zps_seal_cipher_available(ZPS_SEAL_XCHACHA20POLY1305));
    check_cipher(ZPS_SEAL_XCHACHA20POLY1305);
}

static void test_frame_parse(void **state)
{
    (void)state;
    unsigned char f[ZPS_SEAL_FRAME_BYTES] = {'z', 'p', 's', 'S'}, id[16];
    uint64_t counter;
    unsigned frames;
    size_t chunks;
    f[28] = 2;
    assert_int_equal(zps_seal_frame_parse(f, sizeof(f), id, &counter, &frames, &chunks), 0);
    assert_int_equal(zps_seal_frame_parse(f, sizeof(f) - 1, id, &counter, &frames, &chunks),
                     ZPS_ESEAL);
    f[29] = 1; /* chunks without a payload */
    assert_int_equal(zps_seal_frame_parse(f, sizeof(f), id, &counter, &frames, &chunks), ZPS_ESEAL);
    f[0] = 'Z';
    assert_int_equal(zps_seal_frame_parse(f, sizeof(f), id, &counter, &frames, &chunks), ZPS_ESEAL);
    assert_int_equal(zps_seal_cipher_parse(zps_seal_cipher_name(ZPS_SEAL_AES256GCM)),
                     ZPS_SEAL_AES256GCM);
    assert_int_equal(zps_seal_cipher_parse("rot13"), ZPS_SEAL_NONE);
    char hex[33];
    unsigned char back[16];
    zps_seal_hex((const unsigned char *)"0123456789abcdef", 16, hex);
    assert_int_equal(zps_seal_unhex(hex, back, 16), 0);
    assert_memory_equal(back, "0123456789abcdef", 16);
    assert_int_equal(zps_seal_unhex("zz", back, 1), ZPS_EINVAL);
}

int main(void)
{
    assert_int_equal(zps_seal_library_init(), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aes256gcm),
        cmocka_unit_test(test_xchacha20poly1305),
        cmocka_unit_test(test_frame_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
