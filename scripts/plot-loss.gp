# Training loss (mean over the workers' steps, binned) against clock.
load "scripts/plot-common.gp"
set output out."/fig-loss".suffix.".png"
set multiplot layout layout_rows, layout_cols title "Training loss against clock (mean over workers, binned)"
do for [i = 1:nsettings] {
    s = word(settings, i)
    set title "stragglers: ".s
    set xlabel "clock"
    set ylabel "training loss"
    set logscale y
    set key top right
    plot for [j = 1:nmodes] sprintf("%s/plot/loss-%s-%s.tsv", out, s, word(modes, j)) \
        using 1:2 with lines lw 2 lc rgb mode_color(j) title word(modes, j)
}
unset multiplot
