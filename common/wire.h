/*
 * wire.h - the only code that touches message bytes.
 *
 * A zps message is a ZeroMQ multipart message: on a ROUTER socket the peer's
 * routing id, then the header frame (a packed zps.Header), then for INIT and
 * PUSH requests and successful PULL replies one payload frame of
 * little-endian float32 values. zps_wire_recv checks everything that can be
 * checked without knowing the server's state -- frame count, header decoding,
 * protocol version, message type, payload length and checksum -- and names
 * each failure with its own code. Semantic checks (ranges, clocks, finite
 * values) belong to the server.
 *
 * Not thread-safe per socket, like ZeroMQ sockets themselves. Receives and
 * sends block only when called without ZMQ_DONTWAIT.
 *
 * Not here: what a request means and the answer to it (server/,
 * docs/protocol.md); resending, timeouts and assembling shards' replies
 * (zps/zps.h, whose API carries none of these types); the checksum
 * itself (checksum.h).
 */
#ifndef ZPS_WIRE_H
#define ZPS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define ZPS_PROTOCOL_VERSION 3u

enum zps_msg_type {
    ZPS_MSG_NONE = 0,
    ZPS_MSG_INIT = 1,
    ZPS_MSG_PULL = 2,
    ZPS_MSG_PUSH = 3,
    ZPS_MSG_STATS = 4,
    ZPS_MSG_HEARTBEAT = 5,
    ZPS_MSG_CHECKPOINT = 6,
    ZPS_MSG_RELOAD_KEYS = 7,
    ZPS_MSG_SESSION = 8, /* over CURVE only: a sealed session (common/seal.h) */
    ZPS_MSG_SHM = 9,     /* a shared-memory session, for a worker on the server's host */
};
#define ZPS_MSG_TYPE_MAX ZPS_MSG_SHM

/* Header flag bits. */
enum {
    ZPS_FLAG_RANGE = 1u << 0,   /* PULL request: offset/length state the expected range */
    ZPS_FLAG_RETRY = 1u << 1,   /* PUSH reply: a retry of a push already taken; not applied again */
    ZPS_FLAG_DROPPED = 1u << 2, /* PUSH reply: too late for its step (backup workers); dropped */
    ZPS_FLAG_REJOINED = 1u << 3, /* reply: the worker had been evicted and is admitted again */
    ZPS_FLAG_BUFFERED = 1u << 4, /* PUSH reply: kept until its clock's step is taken */
    ZPS_FLAG_WAIT = 1u << 5,     /* PULL request of an observer: answer with the model of its
                                  * clock once it exists, not at once (zps_consistency_observe) */
    ZPS_FLAG_EXCHANGE = 1u << 6, /* PUSH request of a worker: its reply is the PULL of the next
                                  * clock, carrying the push's flags (one exchange per clock) */
    ZPS_FLAG_TAKEN = 1u << 7,    /* reply to an exchange: its push was taken (an error reply
                                  * too: then the pull failed after the push was taken) */
    ZPS_FLAG_BF16 = 1u << 8,     /* the payload frame holds `length` bfloat16 values (bf16.h),
                                  * not float32; on a PULL or PUSH request: its reply's
                                  * parameters are wanted as bfloat16 too */
    ZPS_FLAG_SHM = 1u << 9,      /* the payload is in the connection's shared-memory session
                                  * (server/shm.h), not in a frame: a PUSH's in the worker's
                                  * slot, a PULL reply's in buffer shm_buffer; on a PULL
                                  * request: such a reply is wanted */
    ZPS_FLAG_NOT_INIT_NOW = 1u << 10, /* PULL request: before INIT, refuse it at once with
                                       * ZPS_ENOTINIT rather than hold it until INIT */
    ZPS_FLAG_LEASE = 1u << 11,    /* request of a worker to shard 0 (shared data assignment,
                                   * consistency/assign.h): the plan, lease_want and `leases`
                                   * (those it still has) are set; its reply's `leases` are the
                                   * worker's leases as shard 0 has them */
    ZPS_FLAG_EXHAUSTED = 1u << 12, /* reply with LEASE: no batch is left to hand out */
    ZPS_FLAG_FINISHED = 1u << 13,  /* HEARTBEAT request of a worker: it has no batch left and
                                    * stops; SSP's bound and observers no longer wait for it */
    ZPS_FLAG_BY_PUSHES = 1u << 14, /* PULL request of an observer, with WAIT: the model once
                                    * clock * W pushes are in (shared data assignment, where
                                    * workers run different numbers of clocks), or once every
                                    * worker has finished */
};

/* Leases a header carries at most (ZPS_ASSIGN_MAX_HELD). */
#define ZPS_WIRE_MAX_LEASES 8

/*
 * A payload larger than this travels as several frames: each of exactly
 * ZPS_WIRE_FRAME_BYTES but the last, which holds the rest (1 to
 * ZPS_WIRE_FRAME_BYTES bytes). `length` and `checksum` are those of the
 * frames' bytes in order. A receiver's ZeroMQ then allocates no buffer
 * larger than this, and the memory of one message's frames serves the next
 * (zps_wire_tune_malloc): large messages stop costing a page fault
 * per 4 KiB. A payload in one frame of any size is still accepted.
 */
#define ZPS_WIRE_FRAME_BYTES (1u << 20)

#define ZPS_ERROR_TEXT_MAX 256
#define ZPS_PEER_ID_MAX 255

/* The decoded header. Field meanings are documented in proto/zps.proto. */
typedef struct zps_header {
    uint32_t version;
    uint32_t type; /* enum zps_msg_type */
    bool reply;
    int32_t worker;
    uint64_t request_id;
    uint64_t clock;
    uint64_t model_version;
    uint64_t min_clock;
    uint64_t total;
    uint64_t offset;
    uint64_t length;
    uint32_t batch;
    int32_t status;
    uint32_t checksum;
    uint32_t flags;
    uint32_t shard_index;
    uint32_t shard_count;
    uint64_t update_staleness; /* PUSH replies: updates applied since the pulled version */
    uint64_t next_clock;
    uint64_t config_fingerprint; /* replies: the server's; INIT/PUSH: the agreed one (0: none) */
    uint64_t waited_us;          /* replies to a pull or an exchange: held for its rule, us */
    uint32_t shm_buffer;         /* PULL replies with ZPS_FLAG_SHM: the buffer of the payload */
    /* Shared data assignment (ZPS_FLAG_LEASE; proto/zps.proto). */
    uint64_t plan_examples;
    uint32_t plan_batch;
    uint32_t plan_epochs;
    uint32_t lease_want;
    uint64_t lease_done; /* PUSH: g + 1 of the batch it completes (0: none) */
    uint32_t nleases;
    uint64_t leases[ZPS_WIRE_MAX_LEASES];
    char error[ZPS_ERROR_TEXT_MAX];
    const char *json; /* send: borrowed, may be NULL; recv: owned by the zps_message_t */
} zps_header_t;

/* Bytes per payload element: 2 for a bfloat16 payload (ZPS_FLAG_BF16), else 4. */
static inline size_t zps_wire_elem_bytes(const zps_header_t *hdr)
{
    return (hdr->flags & ZPS_FLAG_BF16) ? 2 : 4;
}

/* A ROUTER socket's routing id for one peer, and the connection it used. */
typedef struct zps_peer {
    size_t len;
    unsigned char id[ZPS_PEER_ID_MAX];
    int fd; /* the descriptor of the connection (ZMQ_SRCFD), or -1: unknown */
    /* The authenticated key of the connection, in Z85 (the User-Id the
     * server's ZAP handler gave it; docs/security.md), or "" when the
     * connection was not authenticated. */
    char user[41];
    /* The server's number for the sealed session the message came in
     * (server/sessions.h), or 0: it came over the CURVE or plain socket. */
    uint64_t session;
} zps_peer_t;

/* One received message. */
typedef struct zps_message {
    zps_header_t hdr;
    zps_peer_t peer; /* set on ROUTER sockets, even when the message is bad */
    bool has_peer;
    bool has_payload;
    zmq_msg_t payload; /* valid when has_payload; the float32 values, 4-byte aligned (the
                        * bfloat16 values as received while `narrow`) */
    /* A payload that came in several frames, kept as it came: `nframes`
     * frames, in order (`payload` is then unused). zps_wire_recv checks
     * them where they are; zps_message_copy_verified copies them out,
     * zps_payload_take keeps them, zps_message_flatten makes them one,
     * zps_message_copy_out copies them out unchecked once checked.
     * A bfloat16 payload is widened into one buffer by zps_wire_recv
     * instead, from a pool kept for reuse (zps_wire_pool_limit). */
    zmq_msg_t *frames;
    size_t nframes;
    /* The payload is still the bfloat16 frame (ZPS_FLAG_BF16) of a message
     * received with zps_wire_recv_deferred: zps_message_copy_verified widens
     * it. zps_wire_recv widens a bfloat16 payload on receipt (hdr.flags keeps
     * the bit: the sender wants bfloat16 back). */
    bool narrow;
    char *json;     /* owned copy of hdr.json, or NULL */
    uint64_t bytes; /* bytes of all frames, for the byte counters */
    /* Bytes it took on a ZMTP connection: its frames with their headers,
     * the routing id (added by the ROUTER) excluded. */
    uint64_t wire_bytes;
    /* Set when the payload's checksum was verified on receipt: the index of
     * its first non-finite value, found in the same pass (hdr.length when
     * every value is finite). */
    bool scanned;
    uint64_t first_nonfinite;
    /* Also when scanned: the largest |value| of the payload (INFINITY when
     * one is not finite), for the optimizer's bounds (optimizer.h). */
    float abs_max;
    /* zps_wire_recv_sealed's ZPS_ESEAL: the seal frame named a session the
     * finder did not know (rather than a bad tag or a replay), and its id. */
    bool seal_unknown;
    unsigned char seal_id[16];
} zps_message_t;

/* Fills `hdr` with zeros and the current protocol version. */
void zps_header_init(zps_header_t *hdr, enum zps_msg_type type);

/* Which messages carry a payload frame. */
bool zps_wire_wants_payload(const zps_header_t *hdr);

/*
 * Receives one whole multipart message from `sock` (non-blocking when
 * `flags` has ZMQ_DONTWAIT). `router` says whether the first frame is a
 * routing id.
 *
 * Returns 0 for a valid message. Returns ZPS_EAGAIN when nothing is ready,
 * ZPS_ESOCKET on a socket failure, or a protocol error (ZPS_EPROTO,
 * ZPS_EVERSION, ZPS_EFRAMES, ZPS_ETYPE, ZPS_ELENGTH, ZPS_ECHECKSUM) or
 * ZPS_ENOMEM: the bad
 * message has still been consumed whole, `msg->peer` is set so the caller can
 * reply, and `msg->hdr` holds whatever could be decoded (request_id, type).
 * On every return except ZPS_EAGAIN and ZPS_ESOCKET the caller must call
 * zps_message_close(msg).
 */
int zps_wire_recv(void *sock, int flags, bool router, zps_message_t *msg);

/*
 * As zps_wire_recv, but leaves the payload's checksum unverified (msg->scanned
 * stays false), because the caller will copy the payload out with
 * zps_message_copy_verified, which checks it in the same pass over memory.
 * Everything else is checked as zps_wire_recv checks it.
 */
int zps_wire_recv_deferred(void *sock, int flags, bool router, zps_message_t *msg);

/*
 * Checks the payload of a message received with zps_wire_recv_deferred as
 * zps_wire_recv would have on receipt: its checksum verified, its values
 * scanned (msg->scanned, first_nonfinite, abs_max), a bfloat16 payload
 * widened. Returns 0 (also for a message without payload, or one already
 * checked), ZPS_ECHECKSUM or ZPS_ENOMEM. Any thread may call it, for a
 * message no other thread touches meanwhile.
 */
int zps_message_check(zps_message_t *msg);

/* Whether a and b are the same peer: the same routing id in the same sealed session, or none. */
bool zps_peer_same(const zps_peer_t *a, const zps_peer_t *b);

/*
 * Copies the payload of a message received with zps_wire_recv_deferred to
 * dst (hdr.length floats, widened from bfloat16 when the message is
 * `narrow`) while computing its checksum. Returns 0, or ZPS_ECHECKSUM when
 * it does not match (dst then holds untrusted bytes).
 */
int zps_message_copy_verified(zps_message_t *msg, float *dst);

/* Releases what a received message holds. Safe to call twice. */
void zps_message_close(zps_message_t *msg);

/*
 * Moves a received message to dst (uninitialised), frames, payload and
 * JSON with it, to be handled later; src is left with nothing to release.
 */
void zps_message_move(zps_message_t *dst, zps_message_t *src);

/* The payload of a received message as floats (NULL when it has none, when
 * it is still bfloat16, or still in frames: zps_message_copy_verified). */
static inline const float *zps_message_floats(zps_message_t *msg)
{
    return msg->has_payload && !msg->narrow && !msg->frames
               ? (const float *)zmq_msg_data(&msg->payload)
               : NULL;
}

/* Value i (< hdr.length) of a received float32 payload, in one frame or several. */
float zps_message_at(const zps_message_t *msg, size_t i);

/*
 * Copies a received float32 payload that has been checked (zps_wire_recv,
 * or zps_message_check after zps_wire_recv_deferred), in one frame or
 * several, to dst[hdr.length]: no check, no allocation. A message without
 * a payload copies nothing.
 */
void zps_message_copy_out(const zps_message_t *msg, float *dst);

/* Whether such a payload equals v[hdr.length] byte for byte (true without a payload). */
bool zps_message_equals(const zps_message_t *msg, const float *v);

/*
 * Copies a float32 payload of several frames into one buffer (from the
 * pool below), so that zps_message_floats returns it. Returns 0 (also when
 * there was nothing to do) or ZPS_ENOMEM (the message is unchanged).
 */
int zps_message_flatten(zps_message_t *msg);

/*
 * A received float32 payload taken out of its message to be kept (a BSP
 * step's buffered push), in one segment or one per frame, where ZeroMQ
 * received it: seg[i] holds values [i * seg_len, ...). seg_len is
 * ZPS_WIRE_FRAME_BYTES / 4 for frames, the payload's length for one.
 */
typedef struct zps_payload {
    zmq_msg_t one;      /* when frames is NULL */
    zmq_msg_t *frames;  /* [nseg] */
    const float **seg;  /* [nseg]: &first when one segment */
    const float *first; /* the one segment */
    size_t nseg;
    size_t seg_len;
} zps_payload_t;

/* Moves msg's float32 payload into p (msg keeps none). Returns 0 or ZPS_ENOMEM (msg unchanged). */
int zps_payload_take(zps_payload_t *p, zps_message_t *msg);

/* Moves what src holds into dst (uninitialised or closed); src is left empty. */
void zps_payload_move(zps_payload_t *dst, zps_payload_t *src);

/* Releases what p holds; an empty one is left. Safe to call twice. */
void zps_payload_close(zps_payload_t *p);

/*
 * Payloads of several frames made into one buffer (bfloat16 ones widened
 * by zps_wire_recv, zps_message_flatten) go into buffers that are kept,
 * once free, for the next payload of their size, up to `bytes` of free
 * buffers in all (default 0: none kept). A server sets it to what its
 * memory bound already counts for pushes in hand.
 */
void zps_wire_pool_limit(uint64_t bytes);

/* Bytes of free buffers the pool keeps now. */
uint64_t zps_wire_pool_bytes(void);

/*
 * Sets the process's malloc so that buffers up to 32 MiB (frames among
 * them) come from its heap and freed memory stays there for the next message,
 * rather than being mapped and unmapped per message (each mapping costs a
 * page fault per 4 KiB on first touch); every thread shares that one heap
 * (glibc's per-thread heaps are unmapped whenever one empties, which a
 * burst of frames received and freed together does). Programs that move
 * large payloads call it first thing in main(), before ZeroMQ starts its
 * threads: the memory of the frames of the largest messages received at
 * once then stays resident. zps_client_new calls it too, unless its
 * options say keep_malloc. Calling it again changes nothing.
 */
void zps_wire_tune_malloc(void);

/*
 * Gives the heap's free memory back to the kernel, once, after a large
 * receive that nothing will reuse: a server's INIT, whose frames would
 * otherwise stay resident for the whole run (zps_wire_tune_malloc never
 * trims), and under shared memory no push's frames take their place.
 * Costs a pass of madvise over the free memory (milliseconds per GiB).
 */
void zps_wire_trim_heap(void);

/* Releases msg's payload (frames or one) now, before the message is closed. */
void zps_message_drop_payload(zps_message_t *msg);

/* Called by ZeroMQ's I/O thread when it no longer needs a zero-copy payload. */
typedef void zps_wire_free_fn(void *data, void *hint);

/*
 * Sends one message: `peer` first when non-NULL (ROUTER), then the header,
 * then the payload of `count` elements when zps_wire_wants_payload(hdr):
 * float32 values, or bfloat16 ones when hdr->flags has ZPS_FLAG_BF16.
 * Sets hdr->length and hdr->checksum from the payload.
 *
 * A payload larger than ZPS_WIRE_FRAME_BYTES is sent as several frames
 * that share its buffer (no copy).
 *
 * Payload ownership: when `ffn` is NULL the floats are copied before the call
 * returns. Otherwise they are sent without copying: the caller keeps the
 * buffer alive and unchanged until ZeroMQ calls ffn(payload, hint), possibly
 * from its I/O thread, possibly after this call returns.
 *
 * `flags` may hold ZMQ_DONTWAIT. Returns 0, ZPS_EAGAIN (nothing sent; the
 * zero-copy buffer has then been released through ffn), ZPS_EINVAL for a
 * header that cannot be packed, or ZPS_ESOCKET.
 */
int zps_wire_send(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                  size_t count, zps_wire_free_fn *ffn, void *hint, int flags);

/*
 * As zps_wire_send, for a payload whose CRC32C the caller has already put in
 * hdr->checksum (computed with zps_crc_scan, which also checks that every
 * value is finite): a zero-copy payload (ffn non-NULL) is not read here.
 * With ffn NULL the payload is copied and its checksum computed as usual.
 */
int zps_wire_send_summed(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                         size_t count, zps_wire_free_fn *ffn, void *hint, int flags);

/*
 * As zps_wire_send, with the payload already in a ZeroMQ message (for
 * example one the server filled while computing its checksum). The checksum
 * is taken from hdr->checksum as given; hdr->length is set. `payload` is
 * consumed (closed) in every case.
 */
int zps_wire_send_msg(void *sock, const zps_peer_t *peer, zps_header_t *hdr, zmq_msg_t *payload,
                      int flags);

/* ---- sealed messages (seal.h) ---- */

struct zps_seal;

/*
 * Finds the session whose 16-byte id a sealed message names, or returns
 * NULL. It may fill in `peer` (the key the session was granted to, the
 * session's number) for the request's authorization.
 */
typedef struct zps_seal *zps_wire_seal_find_fn(void *arg, const unsigned char *id,
                                               zps_peer_t *peer);

/*
 * As zps_wire_recv (or zps_wire_recv_deferred when !verify), for a socket
 * whose messages are sealed: [routing id] seal frame, header, payload. The
 * message is opened with the session `find` returns before anything in it
 * is decoded. A seal frame that is not one, an unknown session
 * (msg->seal_unknown), a tag that does not verify or a counter already
 * seen: ZPS_ESEAL, the message consumed whole, nothing of it decoded.
 */
int zps_wire_recv_sealed(void *sock, int flags, bool router, bool verify,
                         zps_wire_seal_find_fn *find, void *arg, zps_message_t *msg);

/*
 * As zps_wire_send_summed (summed true) or zps_wire_send, sealed with the
 * session's next counter. The payload is encrypted into a message of its
 * own: the caller's buffer is free when the call returns.
 */
int zps_wire_send_sealed(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                         size_t count, bool summed, struct zps_seal *seal, int flags);

/*
 * As zps_wire_send_msg, sealed: the payload message (possibly shared with
 * other replies) is read, encrypted into a new one, and closed.
 */
int zps_wire_send_msg_sealed(void *sock, const zps_peer_t *peer, zps_header_t *hdr,
                             zmq_msg_t *payload, struct zps_seal *seal, int flags);

/*
 * Sends the server's notice, in the clear, that it knows no session of the
 * 16-byte `id` (seal.h, ZPS_SEAL_UNKNOWN) to `peer` (a ROUTER's). Never
 * blocks. Returns 0, ZPS_EAGAIN, ZPS_ENOMEM or ZPS_ESOCKET.
 */
int zps_wire_send_seal_unknown(void *sock, const zps_peer_t *peer, const unsigned char *id);

/*
 * As zps_crc_scan_max, copying src[count] to dst in the same pass: the CRC32C
 * and the scan are of the bytes as copied, read back from dst (src, memory
 * another process may write, such as a shared-memory slot, may change
 * meanwhile; dst is the caller's own).
 */
uint32_t zps_crc_copy_scan_max(float *dst, const float *src, size_t count, size_t *first_bad,
                               float *abs_max);

/*
 * The other way round: dst is the memory another process may write, src the
 * caller's own. The CRC32C and the scan are of src, so a value changed in
 * dst after the copy is never blamed on src, and the checksum stays the
 * payload's own when it is sent again from src over a socket (the reader's
 * checksum of dst finds the change).
 */
uint32_t zps_crc_copy_out_scan_max(float *dst, const float *src, size_t count, size_t *first_bad,
                                   float *abs_max);

/* True when all `count` values are finite; *first_bad gets the index of the first that is not. */
bool zps_all_finite(const float *v, size_t count, size_t *first_bad);

/*
 * The CRC32C of v[count]'s bytes, and in *first_bad the index of the first
 * non-finite value (count when there is none), in one pass over memory: each
 * block is scanned right after it is checksummed, while it is in cache.
 * From 2 MiB the pass is cut into chunks for the process's helper threads
 * (pool.h), as are zps_crc_scan_max's, zps_crc_copy_scan_max's and a
 * received payload's frames.
 */
uint32_t zps_crc_scan(const float *v, size_t count, size_t *first_bad);

/*
 * As zps_crc_scan, and in *abs_max the largest |v[i]| (0 for count 0,
 * INFINITY when a value is not finite), found in the same pass over memory.
 */
uint32_t zps_crc_scan_max(const float *v, size_t count, size_t *first_bad, float *abs_max);

#endif
