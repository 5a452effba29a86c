"""The project's studies, outside the library: each folder holds one study's spec, its own
analysis and a README (studies/README.md). Run them from the repository root, e.g.
`python -m studies.testbed_mechanism.analysis`."""
