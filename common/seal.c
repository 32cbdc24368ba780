/*
 * seal.c - sealing and opening messages of a session; see seal.h.
 */
#include "seal.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>

#include "error.h"
#include "pool.h"

static const unsigned char MAGIC[4] = {'z', 'p', 's', 'S'};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc;

static void init_once(void)
{
    init_rc = sodium_init() < 0 ? ZPS_EINVAL : 0;
}

int zps_seal_library_init(void)
{
    pthread_once(&once, init_once);
    return init_rc;
}

bool zps_seal_cipher_available(enum zps_seal_cipher cipher)
{
    if (zps_seal_library_init() != 0)
        return false;
    if (cipher == ZPS_SEAL_AES256GCM)
        return crypto_aead_aes256gcm_is_available() != 0;
    return cipher == ZPS_SEAL_XCHACHA20POLY1305;
}

const char *zps_seal_cipher_name(enum zps_seal_cipher cipher)
{
    switch (cipher) {
    case ZPS_SEAL_AES256GCM:
        return "aes256gcm";
    case ZPS_SEAL_XCHACHA20POLY1305:
        return "xchacha20poly1305";
    default:
        return "none";
    }
}

enum zps_seal_cipher zps_seal_cipher_parse(const char *name)
{
    if (strcmp(name, "aes256gcm") == 0)
        return ZPS_SEAL_AES256GCM;
    if (strcmp(name, "xchacha20poly1305") == 0)
        return ZPS_SEAL_XCHACHA20POLY1305;
    return ZPS_SEAL_NONE;
}

enum zps_seal_cipher zps_seal_cipher_choose(bool peer_aes)
{
    return peer_aes && zps_seal_cipher_available(ZPS_SEAL_AES256GCM) ? ZPS_SEAL_AES256GCM
                                                                     : ZPS_SEAL_XCHACHA20POLY1305;
}

void zps_seal_new(zps_seal_t *s, enum zps_seal_cipher cipher)
{
    memset(s, 0, sizeof(*s));
    randombytes_buf(s->id, sizeof(s->id));
    crypto_aead_xchacha20poly1305_ietf_keygen(s->key); /* 32 random bytes, for either cipher */
    s->cipher = cipher;
    s->out_dir = 'S';
}

void zps_seal_join(zps_seal_t *s, const unsigned char id[ZPS_SEAL_ID_BYTES],
                   const unsigned char key[ZPS_SEAL_KEY_BYTES], enum zps_seal_cipher cipher)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->id, id, ZPS_SEAL_ID_BYTES);
    memcpy(s->key, key, ZPS_SEAL_KEY_BYTES);
    s->cipher = cipher;
    s->out_dir = 'C';
}

void zps_seal_wipe(zps_seal_t *s)
{
    sodium_memzero(s, sizeof(*s));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The nonce of part `index` (0: the header, i+1: payload chunk i) of
 * message `counter` in direction `dir`. */
static void nonce_for(unsigned char nonce[24], unsigned char dir, size_t index, uint64_t counter)
{
    memset(nonce, 0, 24);
    nonce[0] = dir;
    nonce[1] = (unsigned char)index;
    nonce[2] = (unsigned char)(index >> 8);
    nonce[3] = (unsigned char)(index >> 16);
    put_le64(nonce + 4, counter);
}

static void encrypt(const zps_seal_t *s, unsigned char *dst, const unsigned char *src, size_t n,
                    unsigned char tag[ZPS_SEAL_TAG_BYTES], const unsigned char *ad,
                    const unsigned char nonce[24])
{
    unsigned long long taglen;
    if (s->cipher == ZPS_SEAL_AES256GCM)
        crypto_aead_aes256gcm_encrypt_detached(dst, tag, &taglen, src, n, ad, ZPS_SEAL_AD_BYTES,
                                               NULL, nonce, s->key);
    else
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(dst, tag, &taglen, src, n, ad,
                                                            ZPS_SEAL_AD_BYTES, NULL, nonce, s->key);
}

static bool decrypt(const zps_seal_t *s, unsigned char *buf, size_t n,
                    const unsigned char tag[ZPS_SEAL_TAG_BYTES], const unsigned char *ad,
                    const unsigned char nonce[24])
{
    if (s->cipher == ZPS_SEAL_AES256GCM)
        return crypto_aead_aes256gcm_decrypt_detached(buf, NULL, buf, n, tag, ad, ZPS_SEAL_AD_BYTES,
                                                      nonce, s->key) == 0;
    if (s->cipher == ZPS_SEAL_XCHACHA20POLY1305)
        return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                   buf, NULL, buf, n, tag, ad, ZPS_SEAL_AD_BYTES, nonce, s->key) == 0;
    return false;
}

/* ---- the payload's chunks, on several threads ---- */

/* One payload to seal or open, in chunks of ZPS_SEAL_CHUNK_BYTES. */
typedef struct job {
    const zps_seal_t *s;
    bool open;
    unsigned char dir;
    uint64_t counter;
    const unsigned char *ad;
    unsigned char *dst;
    const unsigned char *src;
    size_t len, chunks;
    unsigned char *tags;          /* seal: written */
    const unsigned char *tags_in; /* open: read */
    atomic_bool bad;
} job_t;

static void run_chunk(void *arg, size_t i, unsigned lane)
{
    (void)lane;
    job_t *j = arg;
    size_t off = i * ZPS_SEAL_CHUNK_BYTES;
    size_t n = j->len - off < ZPS_SEAL_CHUNK_BYTES ? j->len - off : ZPS_SEAL_CHUNK_BYTES;
    unsigned char nonce[24];
    nonce_for(nonce, j->dir, i + 1, j->counter);
    if (j->open) {
        if (!decrypt(j->s, j->dst + off, n, j->tags_in + i * ZPS_SEAL_TAG_BYTES, j->ad, nonce))
            atomic_store(&j->bad, true);
    } else {
        encrypt(j->s, j->dst + off, j->src + off, n, j->tags + i * ZPS_SEAL_TAG_BYTES, j->ad,
                nonce);
    }
}

/* Runs every chunk of j, on the process's helper threads too (pool.h). */
static void run_job(job_t *j)
{
    atomic_init(&j->bad, false);
    zps_pool_run(j->chunks, run_chunk, j);
}

size_t zps_seal_chunks(bool has_payload, size_t len)
{
    if (!has_payload)
        return 0;
    return len == 0 ? 1 : (len + ZPS_SEAL_CHUNK_BYTES - 1) / ZPS_SEAL_CHUNK_BYTES;
}

void zps_seal_message(zps_seal_t *s, unsigned char frame[ZPS_SEAL_FRAME_BYTES],
                      unsigned char *header, size_t header_len, bool has_payload,
                      unsigned char *dst, const unsigned char *src, size_t payload_len,
                      unsigned char *tags)
{
    uint64_t counter = ++s->sent;
    size_t chunks = zps_seal_chunks(has_payload, payload_len);
    memset(frame, 0, ZPS_SEAL_FRAME_BYTES);
    memcpy(frame, MAGIC, sizeof(MAGIC));
    memcpy(frame + 4, s->id, ZPS_SEAL_ID_BYTES);
    put_le64(frame + 20, counter);
    frame[28] = has_payload ? 3 : 2;
    frame[29] = (unsigned char)chunks;
    frame[30] = (unsigned char)(chunks >> 8);
    frame[31] = (unsigned char)(chunks >> 16);
    unsigned char nonce[24];
    nonce_for(nonce, s->out_dir, 0, counter);
    encrypt(s, header, header, header_len, frame + ZPS_SEAL_AD_BYTES, frame, nonce);
    if (has_payload) {
        job_t j = {.s = s,
                   .open = false,
                   .dir = s->out_dir,
                   .counter = counter,
                   .ad = frame,
                   .dst = dst,
                   .src = src,
                   .len = payload_len,
                   .chunks = chunks,
                   .tags = tags};
        run_job(&j);
    }
}

int zps_seal_frame_parse(const unsigned char *frame, size_t len,
                         unsigned char id[ZPS_SEAL_ID_BYTES], uint64_t *counter, unsigned *frames,
                         size_t *chunks)
{
    if (len != ZPS_SEAL_FRAME_BYTES || memcmp(frame, MAGIC, sizeof(MAGIC)) != 0)
        return ZPS_ESEAL;
    memcpy(id, frame + 4, ZPS_SEAL_ID_BYTES);
    *counter = get_le64(frame + 20);
    *frames = frame[28];
    *chunks = (size_t)frame[29] | (size_t)frame[30] << 8 | (size_t)frame[31] << 16;
    if (*frames < 2 || *frames > 3 || (*frames == 2) != (*chunks == 0))
        return ZPS_ESEAL;
    return 0;
}

int zps_seal_open(zps_seal_t *s, const unsigned char frame[ZPS_SEAL_FRAME_BYTES],
                  unsigned char *header, size_t header_len, bool has_payload,
                  unsigned char *payload, size_t payload_len, const unsigned char *tags,
                  size_t tags_len)
{
    unsigned char id[ZPS_SEAL_ID_BYTES];
    uint64_t counter;
    unsigned frames;
    size_t chunks;
    if (zps_seal_frame_parse(frame, ZPS_SEAL_FRAME_BYTES, id, &counter, &frames, &chunks) != 0 ||
        sodium_memcmp(id, s->id, ZPS_SEAL_ID_BYTES) != 0 || frames != (has_payload ? 3u : 2u) ||
        chunks != zps_seal_chunks(has_payload, payload_len) ||
        tags_len != chunks * ZPS_SEAL_TAG_BYTES)
        return ZPS_ESEAL;
    /* A replayed or reordered message: refused before any work is spent on it. */
    if (counter <= s->accepted)
        return ZPS_ESEAL;
    unsigned char dir = s->out_dir == 'C' ? 'S' : 'C';
    unsigned char nonce[24];
    nonce_for(nonce, dir, 0, counter);
    if (!decrypt(s, header, header_len, frame + ZPS_SEAL_AD_BYTES, frame, nonce))
        return ZPS_ESEAL;
    if (has_payload) {
        job_t j = {.s = s,
                   .open = true,
                   .dir = dir,
                   .counter = counter,
                   .ad = frame,
                   .dst = payload,
                   .len = payload_len,
                   .chunks = chunks,
                   .tags_in = tags};
        run_job(&j);
        if (atomic_load(&j.bad))
            return ZPS_ESEAL;
    }
    s->accepted = counter;
    return 0;
}

void zps_seal_hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int zps_seal_unhex(const char *hex, unsigned char *out, size_t n)
{
    if (strlen(hex) != 2 * n)
        return ZPS_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return ZPS_EINVAL;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}
