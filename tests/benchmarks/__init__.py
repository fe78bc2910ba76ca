"""Short runs of the benchmarks, checking that they work and report what they claim (not their
figures). May import benchmarks and any kvscope package.
"""
