# Test accuracy against wall-clock time, one panel per straggler setting, one line per mode.
load "scripts/plot-common.gp"
set output out."/fig-accuracy".suffix.".png"
if (ymin ne "*") { set yrange [real(ymin):] }
if (ymax ne "*") { set yrange [:real(ymax)] }
# The accuracy targets, as dashed lines.
do for [t in targets] {
    set arrow from graph 0, first real(t) to graph 1, first real(t) nohead dt 2 lc rgb "#888888"
}
set multiplot layout layout_rows, layout_cols title sprintf("Test accuracy against wall-clock time (base step %s ms)", base)
do for [i = 1:nsettings] {
    s = word(settings, i)
    set title "stragglers: ".s
    set xlabel "seconds of training"
    set ylabel "test accuracy"
    set key bottom right
    plot for [j = 1:nmodes] sprintf("%s/runs/%s/%s/eval.tsv", out, s, word(modes, j)) \
        using 1:4 with linespoints lw 2 pt 7 ps 0.5 lc rgb mode_color(j) title word(modes, j)
}
unset multiplot
