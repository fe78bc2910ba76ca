"""The report of a run or a sweep (report.md, a self-contained report.html, plots/): a
`document` of sections, each built by one function (`content.RUN_SECTIONS` from the
analysis's summary, `sweep_content.SWEEP_SECTIONS`, the Advice section from the advisor's
`Advice` in `advice`), assembled by `build` and rendered twice (`markdown`, `html`) from
the same blocks, so the two files cannot disagree; `write.write_report` is the entry point.
May import `harness.analysis`, `harness.advisor` (its record and evidence table only),
`harness.bundle`, `harness.formatting`, pandas, numpy, matplotlib (Agg canvas).
"""
