"""The model picker: dialog, model lists, pair settings, recommended pairs, hub search, downloads and
its controller."""
