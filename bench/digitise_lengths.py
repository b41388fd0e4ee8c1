"""Digitise a litgpt 'Distribution of sample lengths' histogram into the percentiles of bench/data/dataset_lengths.csv.

Usage: .venv/bin/python bench/digitise_lengths.py IMAGE MIN MAX MEDIAN
IMAGE is the committed figure (e.g. litgpt tutorials/images/prepare_dataset/alpaca-2k.jpg), MIN/MAX/MEDIAN the
values its legend states. Why this way: the figures state three numbers, but padding a micro-batch to its
longest row needs the whole distribution. The x axis is calibrated on the legend's min and max lines (the
median line then checks it); counts are read as bar area per pixel column, which is linear in counts, so bins
narrower than a pixel still add up; the percentiles are scaled so the median is the stated one.
"""

from __future__ import annotations

import sys

import numpy as np
from PIL import Image

PERCENTILES = [5 * i for i in range(19)] + [92.5, 95, 97.5, 99, 99.5, 100]


def _runs(cols: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for c in cols:
        if groups and c - groups[-1][-1] <= 1:
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def digitise(path: str, lo_v: float, hi_v: float, med_v: float) -> dict:
    a = np.asarray(Image.open(path).convert("RGB")).astype(float)
    red, blue_ch = a[:, :, 0], a[:, :, 2]
    dark = a.sum(2) < 200
    frame = [c for c in range(a.shape[1]) if dark[:, c].sum() > 700]
    left, right = min(frame), max(frame)
    edges = [r for r in range(a.shape[0]) if dark[r, :].sum() > 900]
    top, base = min(edges), max(edges)
    lines = _runs([c for c in range(left + 3, right - 2) if dark[top + 5:base - 5, c].sum() > 250])
    centres = sorted((g[0] + g[-1]) / 2 for g in lines)
    c_min, c_med, c_max = centres[0], centres[1], centres[-1]
    scale = (hi_v - lo_v) / (c_max - c_min)
    bars = np.maximum(np.clip((255 - red) / 224, 0, 1) * ((blue_ch - red) > 15),  # training bars (blue)
                      np.clip((255 - blue_ch) / 241, 0, 1) * ((red - blue_ch) > 40) * (red > 150))  # test (orange)
    bars[dark] = 0
    bars[: top + 250, int(left + 0.68 * (right - left)):] = 0  # the legend box
    cols = np.arange(left + 2, right - 1)
    area = bars[top + 2:base - 1, left + 2:right - 1].sum(0)
    hidden = np.zeros_like(area, bool)
    for g in lines:  # the vertical legend lines hide bar pixels: interpolate those columns
        hidden[(cols >= g[0] - 2) & (cols <= g[-1] + 2)] = True
    area[hidden] = np.interp(cols[hidden], cols[~hidden], area[~hidden])
    xs = lo_v + (cols - c_min) * scale
    w = area / area.sum()
    cw = np.cumsum(w)
    k = med_v / float(np.interp(0.5, cw, xs))
    q = [lo_v] + [min(hi_v, max(lo_v, float(np.interp(p / 100, cw, xs)) * k)) for p in PERCENTILES[1:-1]] + [hi_v]
    return {"median_line": lo_v + (c_med - c_min) * scale, "area_median": med_v / k, "scale": k,
            "mean": float((xs * w).sum()) * k, "lengths": q}


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    d = digitise(argv[0], *(float(v) for v in argv[1:]))
    print(f"median line reads {d['median_line']:.1f}; bar-area median {d['area_median']:.1f}, scaled x{d['scale']:.3f}")
    print(f"mean {d['mean']:.0f}")
    print("percentiles", " ".join(f"{p:g}" for p in PERCENTILES))
    print("lengths", " ".join(str(round(v)) for v in d["lengths"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
