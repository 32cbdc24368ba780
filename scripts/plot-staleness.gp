# Update staleness of applied pushes (the servers' histograms, in updates): share of
# pushes per value.
load "scripts/plot-common.gp"
set output out."/fig-update-staleness".suffix.".png"
set multiplot layout layout_rows, layout_cols title "Update staleness of applied pushes (updates applied between a gradient's pull and its push)"
do for [i = 1:nsettings] {
    s = word(settings, i)
    set title "stragglers: ".s
    set xlabel "update staleness (updates)"
    set ylabel "share of applied pushes"
    set logscale y
    set yrange [1e-4:1.5]
    set xrange [-0.5:*]
    set key top right
    plot for [j = 1:nmodes] sprintf("%s/runs/%s/%s/update_staleness.tsv", out, s, word(modes, j)) \
        using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc rgb mode_color(j) title word(modes, j)
}
unset multiplot
