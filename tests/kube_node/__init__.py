"""Tests on a real node: real containers, CNI and images under the real control plane."""
