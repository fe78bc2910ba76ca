"""The report of a run or a sweep (report.md, a self-contained report.html, plots/): a
`document` of sections built from the analysis's summary (`content`, `sweep_content`,
`build`) and rendered twice (`markdown`, `html`), so the two files cannot disagree;
`write.write_report` is the entry point. Every figure comes from `harness.analysis`, the
advice from the advisor's `Advice` type. May import `harness.analysis`, `harness.advisor`
(its record and Markdown only), `harness.bundle`, `harness.formatting`, pandas, numpy,
matplotlib (Agg canvas).
"""
