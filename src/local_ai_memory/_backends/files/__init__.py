"""The file backend: plain files under the data root, and its file formats."""
