"""Server benchmarks: the real server over stdio, driven by lsp_server.client.

session.py           a simulated typist: typing, cancelling and measuring (`quickdraft bench session`)
session_report.py    figures, table and plots from the session's request records
first_completion.py  the first completion after opening a file, warming on and off
                     (`quickdraft bench first-completion`)
"""
