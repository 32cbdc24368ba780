/*
 * seal.h - sealed sessions: the bulk path of a CURVE-authenticated client.
 *
 * ZeroMQ's CURVE encrypts every frame on its I/O thread with
 * XSalsa20-Poly1305 and costs 4-5x of plain throughput for large frames
 * (docs/benchmarks.md). A sealed session keeps CURVE for what it is good
 * at, authenticating both ends, and moves the bytes over a plain
 * connection whose frames are sealed with an AEAD from libsodium:
 *
 *   1. Over its CURVE connection, a client asks for a session (SESSION).
 *      The server draws a random 16-byte session id and a random 32-byte
 *      key, remembers them with the client's authenticated public key, and
 *      sends them back over CURVE (so only that client learns the key),
 *      with the port of its sealed socket.
 *   2. The client then sends requests to that port, each message sealed:
 *      a seal frame (below), then the header frame and the payload frame
 *      (if any) encrypted in place, each with its own tag. Replies come
 *      back the same way under the same key.
 *
 * A sealed message is four frames (three without a payload):
 *
 *   seal frame (64 bytes):
 *     magic "zpsS" | session id (16) | counter (8, LE) | frames (1: 2 or 3) |
 *     chunks (3, LE: the payload's chunk count, 0 without one) |
 *     header tag (16) | 0 (16)
 *   the header, encrypted
 *   the payload, encrypted in chunks of ZPS_SEAL_CHUNK_BYTES (the last
 *     shorter), each with its own tag
 *   the payload's tags, 16 bytes per chunk, in order
 *
 * The header is sealed with the nonce
 *   direction (1: 'C' client to server, 'S' server to client) | 0 (3) |
 *   counter (8, LE)
 * and payload chunk i (from 0) with the same nonce but i+1 in the three
 * bytes after the direction (12 bytes in all; XChaCha20's 24 zero-padded).
 * Every tag also covers the first 32 bytes of the seal frame as additional
 * data. The counter of a direction starts at 1 and grows by one per
 * message; a receiver accepts only a counter above the last it accepted.
 * So no (key, nonce) pair is ever used twice, no chunk can be moved to
 * another message, position, direction or session, a message cut short or
 * grown fails (the chunk count is covered), and a recorded message is
 * refused when it comes again (docs/security.md, Sealed sessions). Chunks
 * are sealed and opened on several threads at once (the process's pool,
 * pool.h): one AEAD stream runs at 1-2 GB/s on one core.
 *
 * The cipher is AES-256-GCM where the CPU has AES-NI (and the client says
 * it can), XChaCha20-Poly1305 otherwise. No cryptography is written here:
 * every primitive is libsodium's.
 *
 * Not here: which socket carries what, and the sessions a server keeps
 * (server/sessions.h); the wire format of the frames inside (wire.h).
 */
#ifndef ZPS_SEAL_H
#define ZPS_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZPS_SEAL_ID_BYTES 16
#define ZPS_SEAL_KEY_BYTES 32
#define ZPS_SEAL_TAG_BYTES 16
#define ZPS_SEAL_FRAME_BYTES 64
#define ZPS_SEAL_AD_BYTES 32 /* the seal frame's part that every tag covers */
#define ZPS_SEAL_CHUNK_BYTES (256u << 10)
#define ZPS_SEAL_MAX_CHUNKS 0xffffffu

/* A server's notice, in the clear, that it knows no session of this id:
 * one frame, these 4 bytes then the 16-byte id. */
#define ZPS_SEAL_UNKNOWN "zpsU"
#define ZPS_SEAL_UNKNOWN_BYTES (4 + ZPS_SEAL_ID_BYTES)

enum zps_seal_cipher {
    ZPS_SEAL_NONE = 0,
    ZPS_SEAL_AES256GCM = 1,
    ZPS_SEAL_XCHACHA20POLY1305 = 2,
};

/* One end of a session. */
typedef struct zps_seal {
    unsigned char id[ZPS_SEAL_ID_BYTES];
    unsigned char key[ZPS_SEAL_KEY_BYTES];
    enum zps_seal_cipher cipher;
    unsigned char out_dir; /* 'C' on the client, 'S' on the server */
    uint64_t sent;         /* the counter of the last message sealed */
    uint64_t accepted;     /* the counter of the last message opened */
} zps_seal_t;

/* Initialises libsodium once (thread-safe). Returns 0, or ZPS_EINVAL when it cannot start. */
int zps_seal_library_init(void);

/* Whether this machine can run the cipher (AES-256-GCM needs AES-NI and PCLMUL). */
bool zps_seal_cipher_available(enum zps_seal_cipher cipher);

/* "aes256gcm", "xchacha20poly1305"; zps_seal_cipher_parse returns ZPS_SEAL_NONE for others. */
const char *zps_seal_cipher_name(enum zps_seal_cipher cipher);
enum zps_seal_cipher zps_seal_cipher_parse(const char *name);

/* The best cipher both sides run: AES-256-GCM when `peer_aes` and this machine can, else XChaCha20.
 */
enum zps_seal_cipher zps_seal_cipher_choose(bool peer_aes);

/* A new session's server end: a random id and key. */
void zps_seal_new(zps_seal_t *s, enum zps_seal_cipher cipher);

/* A client's end of the session the server described (id and key as granted). */
void zps_seal_join(zps_seal_t *s, const unsigned char id[ZPS_SEAL_ID_BYTES],
                   const unsigned char key[ZPS_SEAL_KEY_BYTES], enum zps_seal_cipher cipher);

/* Zeroes the key (and everything else). */
void zps_seal_wipe(zps_seal_t *s);

/* The chunk count of a payload of `len` bytes (0 without a payload). */
size_t zps_seal_chunks(bool has_payload, size_t len);

/*
 * Seals one message with the next counter. The header's bytes are
 * encrypted in place; the payload (payload_len bytes, when has_payload) is
 * encrypted from `src` into `dst` (they may be the same buffer), its tags
 * written to `tags` (16 * zps_seal_chunks bytes). Writes the 64-byte seal
 * frame to `frame`. The payload must not exceed ZPS_SEAL_MAX_CHUNKS chunks.
 */
void zps_seal_message(zps_seal_t *s, unsigned char frame[ZPS_SEAL_FRAME_BYTES],
                      unsigned char *header, size_t header_len, bool has_payload,
                      unsigned char *dst, const unsigned char *src, size_t payload_len,
                      unsigned char *tags);

/*
 * Reads a seal frame's session id, counter, frame count and chunk count.
 * Returns 0, or ZPS_ESEAL when it is not one (wrong size or magic).
 */
int zps_seal_frame_parse(const unsigned char *frame, size_t len,
                         unsigned char id[ZPS_SEAL_ID_BYTES], uint64_t *counter, unsigned *frames,
                         size_t *chunks);

/*
 * Opens a message sealed by the other end: checks that its counter is
 * above the last accepted and that the frames and chunks are the ones the
 * seal frame states, then decrypts the header (and the payload, with its
 * tags_len bytes of tags) in place. Only when every tag verifies is the
 * counter accepted; otherwise the buffers hold garbage and ZPS_ESEAL is
 * returned.
 */
int zps_seal_open(zps_seal_t *s, const unsigned char frame[ZPS_SEAL_FRAME_BYTES],
                  unsigned char *header, size_t header_len, bool has_payload,
                  unsigned char *payload, size_t payload_len, const unsigned char *tags,
                  size_t tags_len);

/* Lowercase hex of n bytes into out (2n+1 bytes); and back (0, or ZPS_EINVAL). */
void zps_seal_hex(const unsigned char *in, size_t n, char *out);
int zps_seal_unhex(const char *hex, unsigned char *out, size_t n);

#endif
