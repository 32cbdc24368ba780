/*
 * checkpoint.h - shard checkpoints: the file format (format.c: validating,
 * encoding, decoding, verifying) and the directory of them (dir.c: file
 * names, writing one safely, finding the newest good one, pruning old ones).
 *
 * A shard checkpoint is everything a shard needs to continue exactly where it
 * was: which shard of which model it is, its parameters, its optimizer's
 * configuration, state arrays and step count, its model version, the
 * consistency controller's per-worker clocks, and on the shard that holds it
 * the shared data assignment (consistency/assign.h). The byte layout is
 * specified in docs/checkpoint.md: little-endian fixed-width fields, a
 * header, a section table, and a CRC32C for the header, the table and every
 * section, so that every byte of a file is covered by exactly one checksum
 * and a reader can name the part that is bad.
 *
 * This module is pure file I/O on plain structs: no sockets, no event loop, no
 * server internals. The server fills a zps_ckpt_t from its store, optimizer
 * and consistency controller and hands it to zps_ckpt_write (on a threadpool
 * thread: a large shard takes a while to write and sync), and on --resume
 * gets one back from zps_ckpt_find_latest and restores from it.
 *
 * Every function that takes a path or a file descriptor blocks on the file
 * system. None keeps global state (the temporary-name counter is atomic):
 * any thread may call them, and concurrent calls on different files are
 * safe. Two writers of the same shard in the same directory are not
 * supported.
 *
 * Not here: what the server must put in the struct, in particular the BSP
 * rule for pushes that were buffered but not yet stepped, and when
 * checkpoints are written, pruned and resumed (server/, docs/checkpoint.md);
 * printing one for people (tool/ckpt_inspect.c); the optimizer's and the
 * consistency controller's own rules, which validation asks
 * (optimizer/optimizer.h, consistency/consistency.h).
 */
#ifndef ZPS_CHECKPOINT_H
#define ZPS_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optimizer.h"
#include "shard.h"
#include "consistency.h"
#include "assign.h"

/* The format this build writes. It reads this one and the older ones, from
 * ZPS_CKPT_FORMAT_OLDEST on: version 1 is version 2 without the optional
 * assignment section. */
#define ZPS_CKPT_FORMAT 2
#define ZPS_CKPT_FORMAT_OLDEST 1
/* The first 8 bytes of every checkpoint: "ZPSCKPT" and a NUL. */
#define ZPS_CKPT_MAGIC "ZPSCKPT"
/* Final file names: shard-<I>-of-<S>-v<version, 20 digits>.zpsckpt */
#define ZPS_CKPT_SUFFIX ".zpsckpt"

/*
 * Clocks, the version and step counts a checkpoint may hold are below 2^53:
 * STATS reports them as JSON numbers, exact up to there, and no run takes
 * that many steps (285 years at one a microsecond). A larger one is a
 * corrupt or forged file, whatever its CRCs say.
 */
#define ZPS_CKPT_CLOCK_LIMIT (UINT64_C(1) << 53)

/* Optimizer state arrays a checkpoint holds at most, and their name size. */
#define ZPS_CKPT_MAX_STATE 2
#define ZPS_CKPT_NAME_SIZE 16

/*
 * Section ids (docs/checkpoint.md), in file order: shard, optimizer, workers,
 * params, state array i with id ZPS_CKPT_SEC_STATE + i, then, optional and
 * only from format version 2 on, the assignment.
 */
enum {
    ZPS_CKPT_SEC_SHARD = 1,
    ZPS_CKPT_SEC_OPTIMIZER = 2,
    ZPS_CKPT_SEC_WORKERS = 3,
    ZPS_CKPT_SEC_PARAMS = 4,
    ZPS_CKPT_SEC_ASSIGN = 5,
    ZPS_CKPT_SEC_STATE = 0x100,
};
#define ZPS_CKPT_MAX_SECTIONS (5 + ZPS_CKPT_MAX_STATE)

/*
 * One shard's state. Arrays of length 0 (an empty range, no state arrays)
 * may be NULL. Who owns the arrays depends on where the struct came from:
 * filled by the caller for zps_ckpt_write, they stay the caller's; filled by
 * zps_ckpt_read or zps_ckpt_find_latest, they are heap blocks the struct owns
 * and zps_ckpt_fini frees.
 */
typedef struct zps_ckpt {
    /* Which shard of which model. range must be the one zps_shard_range gives. */
    uint32_t shard_index, shard_count;
    uint64_t total;    /* N, elements in the whole model */
    zps_range_t range; /* [lo, hi): this shard's slice */
    uint64_t version;  /* v, the shard's model version */

    /* The optimizer: every field of its configuration and its step count t
     * (zps_optimizer_steps), which is the schedule's position. */
    zps_opt_config_t opt;
    uint64_t opt_steps;

    /* The consistency controller: its configuration and, per worker w < W,
     * the next clock expected (pushed[w]), liveness and dropped-push count. */
    zps_mode_t mode;
    uint32_t workers;   /* W */
    uint32_t ssp_bound; /* the SSP bound s, in clocks */
    uint32_t backup;
    uint64_t *pushed;  /* [W] */
    bool *live;        /* [W] */
    uint64_t *dropped; /* [W] */

    /* The arrays: [hi - lo] float32 each. state[i] is the optimizer's state
     * array i (zps_optimizer_state) and state_names[i] its name. */
    float *params;
    uint32_t nstate;
    char state_names[ZPS_CKPT_MAX_STATE][ZPS_CKPT_NAME_SIZE];
    float *state[ZPS_CKPT_MAX_STATE];

    /* The shared data assignment (consistency/assign.h), on the shard that
     * holds it: the assignment section is written only when have_assign.
     * assign.workers must be W; its arrays are as zps_assign_snapshot fills
     * them (held and nheld may be NULL without a plan). Filled by a read,
     * held and nheld always have W rows, done only with a plan. */
    bool have_assign;
    zps_assign_state_t assign;
    bool *finished; /* [W], with have_assign: the workers that said they have no batch left */
} zps_ckpt_t;

/* Zeroes `c`; zps_ckpt_fini on a zeroed struct is a no-op. */
void zps_ckpt_init(zps_ckpt_t *c);

/*
 * Frees the arrays of a struct filled by zps_ckpt_read or
 * zps_ckpt_find_latest (the assignment's with zps_assign_state_fini, and
 * finished) and zeroes it. Never call it on a struct whose arrays belong to
 * the caller.
 */
void zps_ckpt_fini(zps_ckpt_t *c);

/* ---- the file format (format.c) ---- */

/*
 * Is `c` a checkpoint that may be written: its range the one the range rule
 * gives for its shard, an optimizer configuration zps_opt_config_check
 * accepts with exactly the state arrays (count and names) its optimizer
 * keeps, a valid consistency configuration, no NULL array of nonzero length,
 * only finite values in params and the state arrays (the reader refuses
 * NaN and infinities), and with have_assign an assignment for W workers
 * that zps_assign_restore accepts?
 * Returns 0, ZPS_EINVAL with "not a valid checkpoint: <reason>" in `why`
 * (may be NULL; truncated to why_size), or ZPS_ENOMEM. Reads `c` only; no I/O.
 */
int zps_ckpt_validate(const zps_ckpt_t *c, char *why, size_t why_size);

/*
 * Writes `c` as one whole checkpoint file to `fd`, an empty file open for
 * writing at offset 0: the sections in order, then the header and the
 * section table at the front. Does not sync or close `fd`: a safe name and
 * durability are zps_ckpt_write's. `path` only names the file in messages.
 * Refuses what zps_ckpt_validate refuses, before writing anything. Returns
 * 0; ZPS_EINVAL; ZPS_EIO with "write <path>: <errno text>" in `why` (the
 * file then holds an unspecified part); ZPS_ENOMEM. The arrays are only
 * read. Blocks; memory use is one fixed buffer.
 */
int zps_ckpt_encode(int fd, const zps_ckpt_t *c, const char *path, char *why, size_t why_size);

/*
 * Reads and verifies the checkpoint at `path`: magic, format version, the
 * header's and the section table's checksums, the layout, the file's length,
 * every section's length and checksum, and that the contents are a valid
 * shard state (the same rules zps_ckpt_write applies, finite values
 * included). Opening never waits: a FIFO or device under the name is
 * refused, not read. *out is written only
 * on success and then owns its arrays (zps_ckpt_fini frees them).
 *
 * Returns 0; ZPS_ECORRUPT with the first problem found, for example
 *   "bad magic: not a zps checkpoint"
 *   "unsupported format version 7 (this build reads versions 1 and 2)"
 *   "header checksum mismatch"
 *   "truncated: section 'params' ends at byte 4312, file has 1000"
 *   "section 'optimizer m' checksum mismatch"
 *   "section 'params' is 12 bytes; range [0, 4) needs 16"
 *   "section 'optimizer m': element 7 is not finite (nan)"
 *   "section 'assignment' is 300 bytes; 3 workers, 2 queued leases and 24 batches need 272"
 * ZPS_EIO when the file cannot be opened or read (the errno text, or
 * "PATH is not a regular file (a FIFO)"); ZPS_ENOMEM. Blocks; memory use is the arrays plus a
 * fixed buffer.
 */
int zps_ckpt_read(const char *path, zps_ckpt_t *out, char *why, size_t why_size);

/*
 * Verification of one file, part by part, for `zps checkpoint inspect`.
 */
typedef struct zps_ckpt_section_check {
    uint32_t id;
    char name[32];           /* "shard", "params", "optimizer m", "assignment", ... */
    uint64_t offset, length; /* bytes, from the section table */
    uint32_t crc_stored;     /* from the section table */
    uint32_t crc_computed;   /* over the bytes present (valid when `read` is true) */
    bool read;               /* the bytes were there and have been checksummed */
    int status;              /* 0, or ZPS_ECORRUPT with the reason in `why` */
    char why[256];
} zps_ckpt_section_check_t;

typedef struct zps_ckpt_scan {
    uint64_t file_bytes;   /* the file's size */
    bool header_ok;        /* header and table verified: the fields below are meaningful */
    uint32_t format;       /* the header's format version */
    uint64_t header_total; /* the file size the header records */
    uint32_t nsections;
    zps_ckpt_section_check_t sections[ZPS_CKPT_MAX_SECTIONS];
    /* The small sections that verified, decoded into `meta` (its params and
     * state arrays stay NULL; pushed/live/dropped, and with meta.have_assign
     * the assignment and finished, are owned by the scan). */
    bool have_shard, have_optimizer, have_workers;
    zps_ckpt_t meta;
} zps_ckpt_scan_t;

/*
 * Verifies every part of the file at `path` without stopping at the first
 * bad one (unlike zps_ckpt_read, which stops), and without keeping the large
 * arrays. *scan is filled as far as the file allows, in every case: a bad
 * header or table stops the scan there, a bad section does not.
 *
 * Returns 0 when the whole file is valid (zps_ckpt_read would accept it),
 * ZPS_ECORRUPT with the first problem in `why`, ZPS_EIO when the file cannot
 * be read, ZPS_ENOMEM. Free with zps_ckpt_scan_fini in every case.
 */
int zps_ckpt_verify(const char *path, zps_ckpt_scan_t *scan, char *why, size_t why_size);
void zps_ckpt_scan_fini(zps_ckpt_scan_t *scan);

/*
 * Is `c` a checkpoint of shard `index` of `count`, for a model of
 * `total_or_0` elements (0: the caller does not know N yet)? Returns 0;
 * ZPS_ERANGE when it belongs to another shard or another shard count, or its
 * range is not the one the range rule gives for its N; ZPS_ESIZE when N
 * differs. The reason (both sides' values) goes to `why`.
 */
int zps_ckpt_check_shard(const zps_ckpt_t *c, uint32_t index, uint32_t count, uint64_t total_or_0,
                         char *why, size_t why_size);

/* ---- the directory of checkpoints (dir.c) ---- */

/*
 * Writes the checkpoint file name of shard index/count at `version`
 * (no directory) to buf. Returns 0, or ZPS_EINVAL if it does not fit.
 */
int zps_ckpt_file_name(uint32_t index, uint32_t count, uint64_t version, char *buf, size_t size);

/*
 * Makes sure checkpoints can be written in `dir`: creates it when it does
 * not exist (its parent must), checks that it is a directory, and creates,
 * writes, syncs and removes a probe file there (".zps-probe.<pid>.<n>", a
 * name nothing reads), so that a directory that cannot take a checkpoint is
 * found before a shard has state to lose. Returns 0, or ZPS_EIO with the
 * step, the path and the errno text in `why` (may be NULL), e.g.
 * "/ckpt is not a directory", "create /ckpt/.zps-probe.81.0: Read-only file
 * system"; ZPS_EINVAL for a path too long. Blocks; leaves no file behind
 * except the directory it created.
 */
int zps_ckpt_dir_prepare(const char *dir, char *why, size_t why_size);

/*
 * Writes `c` as "<dir>/shard-<I>-of-<S>-v<version, 20 digits>.zpsckpt":
 * into a new temporary file in `dir` (".shard-...zpsckpt.tmp.<pid>.<n>"),
 * then fsync of the file, rename over the final name (replacing a file of
 * the same version), fsync of the directory. A crash or a failure at any
 * point leaves either the old state of the final name or the complete new
 * file under it, never a partial one; on failure the temporary file is
 * removed (only a crash can leave one behind; readers ignore it).
 *
 * The arrays are read, never changed, and must not change during the call
 * (the server copies them, or stops stepping, while it writes). Blocks for
 * the whole write and sync.
 *
 * Returns 0 with the final path in path_out (may be NULL; truncated to
 * path_size), ZPS_EINVAL when `c` is not a valid checkpoint
 * (zps_ckpt_validate: a bad range, an optimizer configuration
 * zps_opt_config_check refuses, a state count or state names that do not
 * match its optimizer, an invalid consistency configuration, a NULL array of
 * nonzero length, a NaN or infinite value in params or a state array, an
 * assignment not for W workers or one zps_assign_restore refuses) or a
 * path is too long,
 * ZPS_EIO when the file system refused, with the step and the errno text,
 * e.g. "write /ckpt/.shard-0-of-2-...: No space left on device", or
 * ZPS_ENOMEM. Reasons go to `why` (may be NULL; truncated to why_size).
 */
int zps_ckpt_write(const char *dir, const zps_ckpt_t *c, char *path_out, size_t path_size,
                   char *why, size_t why_size);

/*
 * Loads the newest valid checkpoint of shard `index`/`count` in `dir`, by the
 * version in the file name. A file that fails zps_ckpt_read, whose contents
 * are not that shard's (zps_ckpt_check_shard with N unknown), or whose
 * version differs from its name, is skipped and the next older one tried;
 * each skipped file gets one line in `report`:
 *   "skipped shard-0-of-2-v...012.zpsckpt: truncated: section 'params' ends at ..."
 * Other shards' files, temporary files and other names are ignored.
 *
 * Returns 0 with *out filled (owning its arrays) and its path in path_out;
 * ZPS_EIO when there is no candidate at all -- `report` then says
 * "no checkpoint for shard 0/2 in DIR" -- or `dir` cannot be listed (the
 * errno text); ZPS_ECORRUPT when candidates exist but none is usable (the
 * report lists each); ZPS_ENOMEM. `report` may be NULL; it is truncated to
 * report_size and is written in every case. *out and path_out are written
 * only on success.
 */
int zps_ckpt_find_latest(const char *dir, uint32_t index, uint32_t count, zps_ckpt_t *out,
                         char *path_out, size_t path_size, char *report, size_t report_size);

/*
 * As zps_ckpt_find_latest, but considers only versions <= max_version. Under
 * BSP every shard must resume at the same version (docs/checkpoint.md); when
 * one shard's newest checkpoint is lost, the operator resumes all of them at
 * the newest version every shard still has.
 */
int zps_ckpt_find_at_most(const char *dir, uint32_t index, uint32_t count, uint64_t max_version,
                          zps_ckpt_t *out, char *path_out, size_t path_size, char *report,
                          size_t report_size);

/*
 * Deletes all but the newest `keep` (>= 1) checkpoint files of shard
 * `index`/`count` in `dir`, by the version in their names, without reading
 * them. Other shards' files, temporary files and other names are left alone.
 * Returns 0; ZPS_EINVAL for keep 0; ZPS_EIO when `dir` cannot be listed or
 * a file cannot be deleted (the others are still tried).
 */
int zps_ckpt_prune(const char *dir, uint32_t index, uint32_t count, unsigned keep);

#endif
