"""Plots and interactive explorers, one module per notebook group; each figure is drawn from data a function returns,
so tests assert on the data. Layer: top; imports anything below it."""
