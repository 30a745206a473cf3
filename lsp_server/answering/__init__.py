"""The typing path: from an inline-completion request (or the edit before it) to ghost text.

service.py       the completion service the handlers call: one request end to end, the editor's events
model_runs.py    one model run, one object (ModelRun): started, answered at its budget, decoding on, withdrawn
context.py       an LSP document and cursor → the engine's CompletionRequest
scheduler.py     the single engine worker; newer requests supersede older ones
typethrough.py   what of the last answer still fits the cursor, served without the model
following.py     a request that follows the decode going on instead of cancelling it
anticipation.py  runs started at the edit, and the typing rhythm that sets their budget
warming.py       the KV cache warmed before the user asks (open, cursor moves, idle)
"""
