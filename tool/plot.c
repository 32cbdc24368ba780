/*
 * plot.c - `zps plot` and the figures `zps launch` leaves in a run folder.
 * Both write a small gnuplot script and one data file per run into a fresh
 * temporary folder, run gnuplot (found on PATH) on it, and remove the folder.
 * A run's line comes from its eval.tsv (elapsed_s, clock, epoch,
 * test_accuracy, test_loss); examples seen are clock x batch_per_worker x
 * workers from its summary.json (an estimate for an async run, whose workers'
 * clocks differ); the label is the folder's name with the plan (mode,
 * servers x workers) when summary.json says it.
 *
 * Not here: the tables themselves (runstats.c); the study's figures
 * (scripts/compare).
 */
#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fileutil.h"
#include "json.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define MAX_TARGETS 16

typedef struct {
    const char *dir;
    char label[512];
    double examples_per_clock; /* 0 when summary.json does not say */
    double targets[MAX_TARGETS];
    size_t target_count;
    bool has_accuracy; /* some point has a test accuracy (not a regression model's nan) */
} run_t;

/* The full path of gnuplot on PATH into buf, or false. */
static bool find_gnuplot(char *buf, size_t size)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && (size_t)snprintf(buf, size, "%.*s/gnuplot", (int)n, path) < size &&
            access(buf, X_OK) == 0)
            return true;
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

static char *read_file(const char *name)
{
    FILE *f = fopen(name, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                free(s);
                s = NULL;
                break;
            }
            s = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (s)
        s[len] = '\0';
    return s;
}

static const char *base_name(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t i = n;
    while (i > 0 && dir[i - 1] != '/')
        i--;
    return dir + i;
}

/* Fills r's label, examples per clock and targets from summary.json (all optional). */
static void read_summary(run_t *r)
{
    const char *b = base_name(r->dir);
    size_t bl = strcspn(b, "/");
    snprintf(r->label, sizeof(r->label), "%.*s", (int)bl, b);
    char name[PATH_MAX];
    snprintf(name, sizeof(name), "%s/summary.json", r->dir);
    char *text = read_file(name);
    zps_json_t *j = NULL;
    if (!text || zps_json_parse(text, &j, NULL, 0) != 0) {
        free(text);
        return;
    }
    free(text);
    const char *mode = zps_json_string(zps_json_get(j, "mode"));
    double workers = zps_json_number(zps_json_get(j, "workers"), 0);
    double servers = zps_json_number(zps_json_get(j, "servers"), 0);
    double batch = zps_json_number(zps_json_get(j, "batch_per_worker"), 0);
    if (mode && workers > 0)
        snprintf(r->label, sizeof(r->label), "%.*s (%s, %gx%g)", (int)bl, b, mode, servers,
                 workers);
    r->examples_per_clock = batch * workers;
    const zps_json_t *t = zps_json_get(j, "seconds_to_target");
    if (t && t->keys)
        for (size_t i = 0; i < t->count && r->target_count < MAX_TARGETS; i++)
            r->targets[r->target_count++] = strtod(t->keys[i], NULL);
    zps_json_free(j);
}

/*
 * Copies RUN/eval.tsv's points into data as "seconds accuracy loss examples".
 * Returns the number of points, or -1 when eval.tsv cannot be read.
 */
static int write_data(run_t *r, FILE *data)
{
    char name[PATH_MAX];
    snprintf(name, sizeof(name), "%s/eval.tsv", r->dir);
    FILE *f = fopen(name, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        double s, epoch, acc, loss;
        unsigned long long clock;
        if (line[0] == '#' ||
            sscanf(line, "%lf %llu %lf %lf %lf", &s, &clock, &epoch, &acc, &loss) != 5)
            continue;
        fprintf(data, "%.3f\t%.6f\t%.6f\t%.0f\n", s, acc, loss,
                (double)clock * r->examples_per_clock);
        if (!isnan(acc))
            r->has_accuracy = true;
        n++;
    }
    fclose(f);
    return n;
}

/*
 * Runs gnuplot on tmp/plot.gp, its messages into tmp/gnuplot.err: a run's
 * warnings ("empty x range" for a run of one evaluation) are no news, so
 * they are shown only when gnuplot fails, prefixed by `who`. Returns 0 when
 * it exited 0.
 */
static int run_gnuplot(const char *gnuplot, const char *tmp, const char *who)
{
    char script[PATH_MAX + 16], err[PATH_MAX + 16];
    snprintf(script, sizeof(script), "%s/plot.gp", tmp);
    snprintf(err, sizeof(err), "%s/gnuplot.err", tmp);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(err, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        execl(gnuplot, "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st;
    int rc = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            rc = -1;
            break;
        }
    if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        rc = -1;
    FILE *f = rc ? fopen(err, "r") : NULL;
    char line[512];
    for (int n = 0; f && n < 20 && fgets(line, sizeof(line), f); n++)
        fprintf(stderr, "%s: gnuplot: %s%s", who, line, strchr(line, '\n') ? "" : "\n");
    if (f)
        fclose(f);
    unlink(err);
    return rc;
}

static void gp_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* "set output DIR/FILE", the path quoted for gnuplot. */
static void gp_output(FILE *f, const char *dir, const char *file)
{
    char name[PATH_MAX + 32];
    snprintf(name, sizeof(name), "%s/%s", dir, file);
    fprintf(f, "set output ");
    gp_string(f, name);
    fprintf(f, "\n");
}

/*
 * The accuracy row's range: automatic, or [0:1] when no run has an accuracy
 * (a regression model's eval.tsv says nan), where gnuplot would refuse to
 * autoscale and draw nothing.
 */
static void gp_accuracy_range(FILE *f, size_t runs, const run_t *r)
{
    bool any = false;
    for (size_t i = 0; i < runs; i++)
        any = any || r[i].has_accuracy;
    fprintf(f, any ? "set autoscale y\n" : "set yrange [0:1]\n");
}

static void gp_targets(FILE *f, const double *targets, size_t n)
{
    fprintf(f, "unset arrow\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f,
                "set arrow from graph 0, first %g to graph 1, first %g nohead dt 2 lw 1.5 "
                "lc rgb \"#888888\"\n",
                targets[i], targets[i]);
}

/* One panel: column y of every run against column x. */
static void gp_panel(FILE *f, const char *tmp, size_t runs, const run_t *r, int x, int y,
                     const char *title, const char *xlabel, const char *ylabel)
{
    fprintf(f, "set title \"%s\"\nset xlabel \"%s\"\nset ylabel \"%s\"\nplot ", title, xlabel,
            ylabel);
    for (size_t i = 0; i < runs; i++) {
        fprintf(f, "%s\"%s/run%zu.tsv\" using %d:%d with linespoints lw 2 pt 7 ps 0.5 title ",
                i ? ", \\\n     " : "", tmp, i, x, y);
        gp_string(f, r[i].label);
    }
    fprintf(f, "\n");
}

static void gp_header(FILE *f, int width, int height)
{
    fprintf(f,
            "set terminal pngcairo size %d,%d font \",11\" noenhanced\n"
            "set grid lc rgb \"#dddddd\"\nset border lc rgb \"#555555\"\n"
            "set key bottom right\nset datafile separator \"\\t\"\n",
            width, height);
}

/*
 * The figure of `zps plot`: 2x2, accuracy and loss (rows) against seconds and
 * examples (columns); the targets only on the accuracy row.
 */
static void gp_compare(FILE *f, const char *tmp, const char *out, size_t runs, const run_t *r,
                       const double *targets, size_t target_count)
{
    gp_header(f, 1400, 1000);
    fprintf(f, "set output ");
    gp_string(f, out);
    fprintf(f, "\nset multiplot layout 2,2 title \"zps plot: %zu run(s)\"\n", runs);
    gp_targets(f, targets, target_count);
    gp_accuracy_range(f, runs, r);
    gp_panel(f, tmp, runs, r, 1, 2, "test accuracy against time", "seconds of training",
             "test accuracy");
    gp_panel(f, tmp, runs, r, 4, 2, "test accuracy against examples seen", "examples seen",
             "test accuracy");
    gp_targets(f, NULL, 0);
    fprintf(f, "set autoscale y\nset key top right\n");
    gp_panel(f, tmp, runs, r, 1, 3, "test loss against time", "seconds of training", "test loss");
    gp_panel(f, tmp, runs, r, 4, 3, "test loss against examples seen", "examples seen",
             "test loss");
    fprintf(f, "unset multiplot\n");
}

static int make_tmp(char *tmp, size_t size)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmp, size, "%s/zps-plot-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmp) ? 0 : -1;
}

/* The figures a run's gnuplot draws in the temporary folder, before they are copied out. */
static const char *const run_figures[] = {"accuracy.png", "loss.png"};

static void remove_tmp(const char *tmp, size_t runs)
{
    char name[PATH_MAX + 32];
    for (size_t i = 0; i < runs; i++) {
        snprintf(name, sizeof(name), "%s/run%zu.tsv", tmp, i);
        unlink(name);
    }
    for (size_t i = 0; i < sizeof(run_figures) / sizeof(run_figures[0]); i++) {
        snprintf(name, sizeof(name), "%s/%s", tmp, run_figures[i]);
        unlink(name);
    }
    snprintf(name, sizeof(name), "%s/plot.gp", tmp);
    unlink(name);
    rmdir(tmp);
}

/* Writes tmp/runI.tsv for each run; returns false naming the first bad one. */
static bool write_all_data(const char *tmp, size_t runs, run_t *r, bool quiet)
{
    for (size_t i = 0; i < runs; i++) {
        char name[PATH_MAX + 32];
        snprintf(name, sizeof(name), "%s/run%zu.tsv", tmp, i);
        FILE *d = fopen(name, "w");
        if (!d) {
            if (!quiet)
                fprintf(stderr, "zps plot: cannot write %s\n", name);
            return false;
        }
        int n = write_data(&r[i], d);
        fclose(d);
        if (n < 0 && !quiet)
            fprintf(stderr, "zps plot: %s: not a run folder (no eval.tsv)\n", r[i].dir);
        if (n == 0 && !quiet)
            fprintf(stderr, "zps plot: %s: no evaluation yet (eval.tsv has no points)\n", r[i].dir);
        if (n <= 0)
            return false;
    }
    return true;
}

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: zps plot RUN_DIR... [-o FILE.png] [--target ACC]... [--keep-script FILE]\n"
               "  One figure of several `zps launch` run folders: test accuracy and test loss\n"
               "  against seconds of training and against examples seen (2x2), one line per\n"
               "  run, labelled by its folder's name and plan (mode, servers x workers).\n"
               "  -o FILE.png          the figure (default zps-plot.png in this folder)\n"
               "  --target ACC         a dashed accuracy line; repeat or give A,B,...\n"
               "                       (default: none)\n"
               "  --keep-script FILE   also copy the gnuplot script to FILE (its data files\n"
               "                       are removed with the temporary folder)\n"
               "Needs gnuplot on PATH. Exit status: 0 written; 1 a folder is not a run\n"
               "(no eval.tsv), has no evaluation yet, or gnuplot is missing or failed;\n"
               "2 bad usage.\n");
}

static bool copy_file(const char *from, const char *to)
{
    char *s = read_file(from);
    FILE *f = s ? fopen(to, "w") : NULL;
    bool ok = f && fputs(s, f) != EOF;
    if (f && fclose(f) != 0)
        ok = false;
    free(s);
    return ok;
}

int zps_cmd_plot(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                         {"target", required_argument, NULL, 't'},
                                         {"keep-script", required_argument, NULL, 'k'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *out = "zps-plot.png", *keep = NULL;
    double targets[MAX_TARGETS];
    size_t nt = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'k':
            keep = optarg;
            break;
        case 't':
            for (char *p = optarg;;) {
                char *end;
                errno = 0;
                double t = strtod(p, &end);
                if (end == p || errno || !(t >= 0 && t <= 1) || (*end && *end != ',') ||
                    nt == MAX_TARGETS) {
                    fprintf(stderr,
                            "zps plot: invalid --target '%s': expected accuracies in "
                            "[0, 1], A,B,... (at most 16)\n",
                            optarg);
                    return EXIT_USAGE;
                }
                targets[nt++] = t;
                if (!*end)
                    break;
                p = end + 1;
            }
            break;
        case 'h':
            plot_usage(stdout);
            return 0;
        default:
            plot_usage(stderr);
            return EXIT_USAGE;
        }
    }
    size_t runs = (size_t)(argc - optind);
    if (runs == 0) {
        fprintf(stderr, "zps plot: give at least one run folder\n");
        plot_usage(stderr);
        return EXIT_USAGE;
    }
    char gnuplot[PATH_MAX];
    if (!find_gnuplot(gnuplot, sizeof(gnuplot))) {
        fprintf(stderr, "zps plot: gnuplot not found on PATH; install it (e.g. gnuplot-nox)\n");
        return EXIT_FAILED;
    }
    run_t *r = calloc(runs, sizeof(*r));
    if (!r) {
        fprintf(stderr, "zps plot: out of memory\n");
        return EXIT_FAILED;
    }
    for (size_t i = 0; i < runs; i++) {
        r[i].dir = argv[optind + (int)i];
        struct stat st;
        if (stat(r[i].dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "zps plot: %s: not a folder\n", r[i].dir);
            free(r);
            return EXIT_FAILED;
        }
        read_summary(&r[i]);
    }
    int rc = EXIT_FAILED;
    char tmp[PATH_MAX], script[PATH_MAX + 16];
    if (make_tmp(tmp, sizeof(tmp)) != 0) {
        fprintf(stderr, "zps plot: cannot create a temporary folder: %s\n", strerror(errno));
        free(r);
        return EXIT_FAILED;
    }
    if (!write_all_data(tmp, runs, r, false))
        goto done;
    snprintf(script, sizeof(script), "%s/plot.gp", tmp);
    FILE *f = fopen(script, "w");
    if (!f) {
        fprintf(stderr, "zps plot: cannot write %s\n", script);
        goto done;
    }
    gp_compare(f, tmp, out, runs, r, targets, nt);
    if (fclose(f) != 0) {
        fprintf(stderr, "zps plot: cannot write %s\n", script);
        goto done;
    }
    if (keep && !copy_file(script, keep)) {
        fprintf(stderr, "zps plot: cannot write %s\n", keep);
        goto done;
    }
    if (run_gnuplot(gnuplot, tmp, "zps plot") != 0) {
        fprintf(stderr, "zps plot: gnuplot failed on %s (its messages above)\n", out);
        goto done;
    }
    printf("zps plot: %s (%zu run(s))\n", out, runs);
    rc = 0;
done:
    remove_tmp(tmp, runs);
    free(r);
    return rc;
}

int zps_plot_run_figures(int run_fd, const char *run_dir)
{
    static bool said;
    char gnuplot[PATH_MAX];
    if (!find_gnuplot(gnuplot, sizeof(gnuplot))) {
        if (!said)
            fprintf(stderr, "zps launch: gnuplot not found on PATH; figures skipped\n");
        said = true;
        return 1;
    }
    run_t r;
    memset(&r, 0, sizeof(r));
    r.dir = run_dir;
    read_summary(&r);
    char tmp[PATH_MAX], script[PATH_MAX + 16];
    if (make_tmp(tmp, sizeof(tmp)) != 0)
        return -1;
    int rc = 1;
    if (!write_all_data(tmp, 1, &r, true))
        goto done;
    rc = -1;
    snprintf(script, sizeof(script), "%s/plot.gp", tmp);
    FILE *f = fopen(script, "w");
    if (!f)
        goto done;
    /* gnuplot draws into our own temporary folder; the figures are then
     * copied into the run folder as new files made in its descriptor, so
     * gnuplot never opens a name in the run folder. */
    gp_header(f, 900, 600);
    gp_output(f, tmp, run_figures[0]);
    gp_targets(f, r.targets, r.target_count);
    gp_accuracy_range(f, 1, &r);
    gp_panel(f, tmp, 1, &r, 1, 2, "test accuracy against time", "seconds of training",
             "test accuracy");
    gp_output(f, tmp, run_figures[1]);
    gp_targets(f, NULL, 0);
    fprintf(f, "set autoscale y\nset key top right\n");
    gp_panel(f, tmp, 1, &r, 1, 3, "test loss against time", "seconds of training", "test loss");
    fprintf(f, "set output\n");
    if (fclose(f) != 0 || run_gnuplot(gnuplot, tmp, "zps launch") != 0) {
        fprintf(stderr, "zps launch: gnuplot could not draw the figures in %s\n", run_dir);
        goto done;
    }
    rc = 0;
    for (size_t i = 0; i < sizeof(run_figures) / sizeof(run_figures[0]); i++) {
        char from[PATH_MAX + 32];
        snprintf(from, sizeof(from), "%s/%s", tmp, run_figures[i]);
        if (zps_file_copy_to_at(from, run_fd, run_figures[i], 0644) != 0) {
            fprintf(stderr, "zps launch: cannot write %s/%s: %s\n", run_dir, run_figures[i],
                    strerror(errno));
            rc = -1;
        }
    }
done:
    remove_tmp(tmp, 1);
    return rc;
}
