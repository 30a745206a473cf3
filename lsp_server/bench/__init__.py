"""Server benchmarks: a simulated typist driving the real server over stdio.

session.py         typing, cancelling and measuring (`quickdraft bench session`)
session_report.py  figures, table and plots from the request records
"""
