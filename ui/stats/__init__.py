"""Statistics and self-painted widgets: the stats panel, plots, legend, split bar, memory meter and the
side panel that holds them."""
