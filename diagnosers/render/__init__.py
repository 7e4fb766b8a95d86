"""Renderings of heatmaps and diagnoses (PNG, text). Renderers never simulate or detect."""
