"""Server benchmarks: the real server over stdio, driven by lsp_server.client.

session.py           the typing sessions: servers, files, editors at once (`quickdraft bench session`)
typist.py            a simulated typist: typing, cancelling and recording each request
session_report.py    figures, table and plots from the session's request records
first_completion.py  the first completion after opening a file, warming on and off
                     (`quickdraft bench first-completion`)
"""
