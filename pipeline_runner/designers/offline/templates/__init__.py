"""Templates of the offline designer's tools (Python modules and TypeScript plugins).

Each Python template is a real, type-checked module: the designer imports it to
compute expected outputs for acceptance cases, and renders the generated tool by
filling its `# binloop:fill` constants and inlining `_common` at `# binloop:inline`.
"""
