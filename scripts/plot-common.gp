# Shared settings of the study's figures (scripts/compare loads it).
# Variables from the command line: out (the study's folder), modes and
# settings (space-separated lists), base (the base step time in ms), and
# optionally targets (space-separated accuracies), ymin and ymax (the
# accuracy axis' ends, "*" for automatic) and suffix (of the figure's name:
# fig-accuracy.png, with suffix "-link" fig-accuracy-link.png).
set terminal pngcairo size 1400,1000 font ",11" noenhanced
set grid lc rgb "#dddddd"
set border lc rgb "#555555"
# One colour per mode, the same in every figure.
mode_color(j) = word("#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f", (j - 1) % 8 + 1)
nsettings = words(settings)
nmodes = words(modes)
layout_cols = (nsettings > 1) ? 2 : 1
layout_rows = int(ceil(nsettings / 2.0))
if (!exists("targets")) targets = ""
if (!exists("ymin")) ymin = "*"
if (!exists("ymax")) ymax = "*"
if (!exists("suffix")) suffix = ""
