"""Medusa heads: small heads on the verifier's last hidden state that draft tokens t+2, t+3, ..."""
