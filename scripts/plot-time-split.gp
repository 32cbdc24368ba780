# Where each worker's step time goes: compute, padding to the base step,
# injected delay, the pull (including waiting for the consistency rule), the push.
load "scripts/plot-common.gp"
set output out."/fig-time-split".suffix.".png"
set multiplot layout layout_rows, layout_cols title sprintf("Per-worker time split: mean milliseconds per step (base step %s ms)", base)
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.8
set xtics rotate by -60 font ",8"
set key outside bottom center horizontal font ",9"
do for [i = 1:nsettings] {
    s = word(settings, i)
    f = sprintf("%s/plot/split-%s.tsv", out, s)
    set title "stragglers: ".s
    set ylabel "ms per step"
    plot f using 2:xtic(1) title "compute" lc rgb "#2ca02c", \
         '' using 3 title "padding to base step" lc rgb "#98df8a", \
         '' using 4 title "injected delay" lc rgb "#d62728", \
         '' using 5 title "pull (incl. waiting)" lc rgb "#1f77b4", \
         '' using 6 title "push" lc rgb "#ff7f0e", \
         '' using 7 title "other" lc rgb "#7f7f7f"
}
unset multiplot
