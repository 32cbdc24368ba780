/*
 * plot.h - figures of `zps launch` run folders, drawn by gnuplot: `zps plot
 * RUN_DIR...` puts several runs on one figure (test accuracy and test loss
 * against seconds of training and against examples seen, one line per run),
 * and zps_plot_run_figures() leaves accuracy.png and loss.png in one run's
 * folder at the end of `zps launch`.
 *
 * Not here: reading the run's metrics into tables (runstats.c writes
 * eval.tsv and summary.json, which this file only reads); the study's
 * figures (scripts/compare, scripts/plot-*.gp).
 */
#ifndef ZPS_PLOT_H
#define ZPS_PLOT_H

/*
 * Runs `zps plot` with argv[0] = "plot" and its flags. Blocks until gnuplot
 * has written the figure. Returns the exit status: 0 the figure is written;
 * 1 a folder is not a run folder or has no evaluation yet, gnuplot is not
 * on PATH, or gnuplot failed (each reason on stderr, naming the folder);
 * 2 bad usage. "--help" prints the usage on stdout and returns 0.
 */
int zps_cmd_plot(int argc, char **argv);

/*
 * Writes RUN_DIR/accuracy.png and RUN_DIR/loss.png from RUN_DIR/eval.tsv
 * (the targets from summary.json as dashed lines): gnuplot draws them in a
 * temporary folder of its own, and each is copied into run_fd (RUN_DIR's
 * descriptor) as a new file, O_EXCL|O_NOFOLLOW, so one that exists already
 * or a link planted under its name is not written. Blocks while gnuplot
 * runs. Never fails a run: returns 0 when both figures are written, 1 when
 * they were skipped (no gnuplot on PATH, said once on stderr per process;
 * no evaluation in eval.tsv, said nowhere) and -1 when gnuplot failed or a
 * figure could not be written (said on stderr). Call from the main thread,
 * outside a signal handler.
 */
int zps_plot_run_figures(int run_fd, const char *run_dir);

#endif
