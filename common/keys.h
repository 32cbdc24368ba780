/*
 * keys.h - CURVE key files and the authorized keys list: the groundwork of
 * authentication (issue 13).
 *
 * Three things, each plain functions over plain structs:
 *
 *   - key pairs: generated with libzmq's CURVE (zmq_curve_keypair), written
 *     as PREFIX.key (secret) and PREFIX.pub (public), and loaded back with
 *     the checks a secret deserves (a regular file, not a link, owned by
 *     this process's user or root, no access for group or others);
 *   - the authorized keys file: which public keys may talk to a server and
 *     in which role (worker for some ranks, admin, reader), parsed
 *     all-or-nothing into a new object, so a reload that fails leaves the
 *     list in force untouched (the caller swaps on success);
 *   - the authorization query: may this key make this request?
 *
 * No globals, no logging: a function that can fail returns 0 or a negative
 * ZPS_E* code and says why in the caller's `why` buffer (zps_set_reason).
 * Every function may be called from any thread; file functions block on
 * the file system, the others do not block. Outputs are written only on
 * success.
 *
 * Not here: CURVE sockets, the ZAP handler and the per-request checks in the
 * server and the clients (they call this module); the wire's message types
 * (the server maps them onto zps_access_t); `zps keygen`'s command line
 * (tool/keygen.c).
 *
 * ---- Files ----
 *
 * PREFIX.pub: the public key in Z85, 40 characters, then a newline; nothing
 * else. Mode 0644 whatever the umask: it is meant to be shared.
 *
 * PREFIX.key: an optional comment line starting with '#', then the secret
 * key in Z85 (40 characters), then an optional newline; nothing else. The
 * public key is derived from the secret (zmq_curve_public) when it is loaded,
 * so the two cannot disagree. zps_keypair_write writes
 *
 *     # zps secret key; its public key is <40 characters>
 *     <40 characters>
 *
 * with mode 0600: the file is created with that mode (O_CREAT | O_EXCL |
 * O_NOFOLLOW) under a temporary name, synced and renamed, so the secret is
 * never readable by others, not even for a moment, and a crash never leaves
 * half a key under the final name.
 *
 * No key starts with '#', although '#' is a Z85 character: each group of
 * five characters encodes 32 bits, and 2^32 - 1 < 84 * 85^4, where 84 is
 * '#''s place in the alphabet (the first character of a group is at most
 * '%'). So a line starting with '#' is never a key, in any of these files.
 *
 * Authorized keys: one key per line,
 *
 *     PUBLIC-KEY worker RANKS      RANKS like 0 or 0,2-3 (ranks and ranges)
 *     PUBLIC-KEY admin
 *     PUBLIC-KEY reader
 *
 * fields separated by spaces or tabs (a carriage return counts as a space);
 * blank lines allowed. A line whose first non-blank character is '#' is a
 * comment, and after the key any '#' starts a comment to the end of the
 * line (inside a key, '#' is one of its characters).
 *
 * Refused, naming the file and line ("FILE:7: unknown role 'writer' ..."):
 * a key that is not 40 valid Z85 characters, an unknown role, a missing or
 * extra field, a bad rank list (an empty item, not a number, a descending
 * range, a rank above ZPS_KEYS_MAX_RANK or not below the worker count when
 * one is given, a rank given twice), the same key on two lines, a NUL
 * byte. The first error in the file is reported (a key listed twice is
 * found once every line has been read).
 *
 * ---- Owners and modes ----
 *
 * Checked with fstat on the opened file, before a byte is read (so it is
 * the file read that was checked, and for a symbolic link, the file it
 * names), at every load, a reload included:
 *
 *     file              owner                      refused mode bits   fix named
 *     secret key        this process's user, root  group/others: any   chmod 600 FILE
 *     authorized keys   this process's user, root  group/others: write chmod go-w FILE
 *     public key        anyone                     group/others: write chmod go-w FILE
 *
 * "This process's user" is its effective uid; a file of another owner is
 * refused naming the fix "chown UID FILE" (with "&& chmod ..." when its
 * mode is wrong too). Anyone who may write the authorized keys can add a
 * key with any role; anyone who may write a client's copy of a server's
 * public key can put theirs in its place. A public key's owner is not
 * checked: it is handed out, and a copy owned by whoever distributes it is
 * usual. The folders above a file are not checked.
 *
 * ---- Authorization ----
 *
 *     request                  admin   worker (ranks R)   reader   unlisted
 *     INIT                     yes     no                 no       no
 *     PUSH as worker w         yes     w in R             no       no
 *     PULL as worker w         yes     w in R             no       no
 *     PULL as an observer      yes     yes                yes      no
 *     STATS                    yes     yes                yes      no
 *     HEARTBEAT as worker w    yes     w in R             no       no
 *     CHECKPOINT               yes     no                 no       no
 *     RELOAD_KEYS              yes     no                 no       no
 *
 * ---- Status codes ----
 *
 * ZPS_EIO: a file cannot be opened, read, written or renamed, is a
 * symbolic link (secret key files only), or is not a regular file (a FIFO is refused
 * without waiting for a writer). ZPS_EINVAL: the file was read but is
 * refused: an owner or mode the table above refuses, malformed content, a
 * file above its size limit; zps_keypair_write: the files exist and force
 * is off, or the prefix is unusable. ZPS_ENOMEM: out of memory. ZPS_EIO
 * from zps_keypair_generate and zps_keypair_from_secret: libzmq has no
 * CURVE.
 */
#ifndef ZPS_KEYS_H
#define ZPS_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZPS_KEY_BYTES 32            /* a CURVE key, binary */
#define ZPS_KEY_Z85_CHARS 40        /* the same in Z85 */
#define ZPS_KEYS_MAX_RANK 65535     /* the highest worker rank (zps-server --workers 65536) */
#define ZPS_KEYS_FILE_MAX (1 << 20) /* bytes: the largest authorized keys file read */

/* A CURVE key pair, binary. Holds a secret: clear it with zps_keypair_clear. */
typedef struct zps_keypair {
    uint8_t public_key[ZPS_KEY_BYTES];
    uint8_t secret_key[ZPS_KEY_BYTES];
} zps_keypair_t;

/* What a key may be, in the authorized keys file. */
typedef enum zps_role {
    ZPS_ROLE_WORKER, /* push, pull and heartbeat for its ranks; stats; observer pulls */
    ZPS_ROLE_ADMIN,  /* everything */
    ZPS_ROLE_READER, /* stats and observer pulls */
} zps_role_t;

/* What a request wants. The server maps its message types onto these. */
typedef enum zps_access {
    ZPS_ACCESS_INIT,
    ZPS_ACCESS_PUSH,          /* as worker w */
    ZPS_ACCESS_PULL_WORKER,   /* as worker w */
    ZPS_ACCESS_PULL_OBSERVER, /* no rank */
    ZPS_ACCESS_STATS,
    ZPS_ACCESS_HEARTBEAT, /* as worker w */
    ZPS_ACCESS_CHECKPOINT,
    ZPS_ACCESS_RELOAD_KEYS,
} zps_access_t;

/* The list of authorized keys, opaque; made by zps_authkeys_parse/_load. */
typedef struct zps_authkeys zps_authkeys_t;

/* ---- keys ---- */

/*
 * Decodes a Z85 key of exactly `len` characters (not NUL-terminated) into
 * key. Returns 0, or ZPS_EINVAL when len is not 40, a character is not Z85,
 * or a group of five does not fit 32 bits (why says which).
 */
int zps_key_decode(const char *z85, size_t len, uint8_t key[ZPS_KEY_BYTES], char *why,
                   size_t why_size);

/* Writes the Z85 form of key into z85 (40 characters and a NUL). */
void zps_key_encode(const uint8_t key[ZPS_KEY_BYTES], char z85[ZPS_KEY_Z85_CHARS + 1]);

/* Sets kp to a fresh random key pair. Returns 0 or ZPS_EIO (libzmq has no CURVE). */
int zps_keypair_generate(zps_keypair_t *kp, char *why, size_t why_size);

/*
 * Sets kp->secret_key to secret and kp->public_key to the public key derived
 * from it (secret may be kp->secret_key itself). Returns 0 or ZPS_EIO
 * (libzmq has no CURVE).
 */
int zps_keypair_from_secret(const uint8_t secret[ZPS_KEY_BYTES], zps_keypair_t *kp, char *why,
                            size_t why_size);

/* Overwrites kp with zeros in a way the compiler does not remove. */
void zps_keypair_clear(zps_keypair_t *kp);

/*
 * Writes PREFIX.key and PREFIX.pub (formats above), each to a temporary
 * name beside it, synced, then put in place, and syncs the directory.
 * Without force, existing files (of any kind, a dangling symbolic link
 * included) are refused with ZPS_EINVAL before anything is written, and
 * are never replaced even by a racing writer; with force they are
 * replaced. On failure nothing new is left behind, except when force is on
 * and PREFIX.key was replaced but PREFIX.pub could not be (why says so).
 * The modes are exactly 0600 and 0644 whatever the umask. The prefix must
 * not be empty or end in '/'. Blocks on the file system. Returns 0,
 * ZPS_EINVAL or ZPS_EIO.
 */
int zps_keypair_write(const char *prefix, const zps_keypair_t *kp, bool force, char *why,
                      size_t why_size);

/*
 * Loads a secret key file (PREFIX.key) and derives its public key. Refuses
 * a symbolic link and a file that is not regular (ZPS_EIO, without
 * waiting on a FIFO), a file owned by another user than this process's or
 * root (ZPS_EINVAL; why names the file, its owner and the fix "chown UID
 * FILE"), a file whose mode gives group or others any access (ZPS_EINVAL;
 * why names the file, its mode and the fix "chmod 600 FILE"), and a
 * malformed file (ZPS_EINVAL). Blocks on the file system. The buffers
 * that held the secret are cleared before returning.
 */
int zps_keypair_load(const char *path, zps_keypair_t *kp, char *why, size_t why_size);

/*
 * Loads a public key file (PREFIX.pub): one line of 40 Z85 characters and
 * an optional newline. Refuses a file that is not regular (ZPS_EIO), one
 * group or others may write (ZPS_EINVAL, naming the fix "chmod go-w
 * FILE"), and a malformed one (ZPS_EINVAL). Blocks on the file system.
 */
int zps_pubkey_load(const char *path, uint8_t key[ZPS_KEY_BYTES], char *why, size_t why_size);

/* ---- authorized keys ---- */

/*
 * Parses the text of an authorized keys file (text[0..len), not necessarily
 * NUL-terminated; `name` is the file's name in messages, "authorized keys"
 * when NULL). `workers`, when not 0, is the number of workers: every rank
 * must be below it. Returns 0 with a new list in *out (the caller frees it
 * with zps_authkeys_free), ZPS_EINVAL with the first error in why
 * ("NAME:LINE: ..."), or ZPS_ENOMEM; *out is untouched on failure. An
 * empty list (no key lines) is valid and allows nothing. Does not block.
 */
int zps_authkeys_parse(const char *name, const char *text, size_t len, uint32_t workers,
                       zps_authkeys_t **out, char *why, size_t why_size);

/*
 * Reads the file at path (at most ZPS_KEYS_FILE_MAX bytes, a regular file;
 * a symbolic link is followed) and parses it as zps_authkeys_parse. A file
 * owned by another user than this process's or root, or one group or
 * others may write, is refused (ZPS_EINVAL, naming the fix: "chown UID
 * FILE", "chmod go-w FILE"). Blocks on the file system. Returns 0,
 * ZPS_EIO, ZPS_EINVAL or ZPS_ENOMEM; *out is untouched on failure, so a
 * reload refused for any of these keeps the list in force.
 */
int zps_authkeys_load(const char *path, uint32_t workers, zps_authkeys_t **out, char *why,
                      size_t why_size);

/* Frees a list; NULL is a no-op. */
void zps_authkeys_free(zps_authkeys_t *list);

/* The number of keys in the list (0 for NULL). */
size_t zps_authkeys_count(const zps_authkeys_t *list);

/*
 * Whether key (binary, as ZAP delivers it) is listed; if so and role is
 * not NULL, *role is its role. A NULL list lists nothing.
 */
bool zps_authkeys_lookup(const zps_authkeys_t *list, const uint8_t key[ZPS_KEY_BYTES],
                         zps_role_t *role);

/*
 * Whether the holder of key may make the request `what` (table above);
 * `worker` is the rank the request acts as for PUSH, PULL_WORKER and
 * HEARTBEAT and is ignored otherwise. A NULL list, an unlisted key and an
 * unknown `what` are refused. When the answer is no, why names the key (its
 * first 8 characters), its role and ranks, and what it may not do ("key
 * ABCDEFGH... is a worker key for ranks 0,2-3; it may not push as worker
 * 1"); when it is yes, why is untouched.
 */
bool zps_authkeys_allows(const zps_authkeys_t *list, const uint8_t key[ZPS_KEY_BYTES],
                         zps_access_t what, long worker, char *why, size_t why_size);

/* "worker", "admin" or "reader"; "?" for anything else. */
const char *zps_role_name(zps_role_t role);

#endif
