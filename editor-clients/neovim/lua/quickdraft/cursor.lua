-- Where the cursor rests, for the server (`quickdraft/didChangeCursor`): it prefills its cache
-- for a completion there before one is asked for, so the first ghost text after a jump comes
-- quickly. Debounced (holding `j` down sends one notification, where the cursor stops), and a
-- position already sent is not sent again.
local compat = require('quickdraft.compat')

local api = vim.api
local M = {}

M.METHOD = 'quickdraft/didChangeCursor'
M.config = {
  debounce_ms = 100,
  enabled = function() return true end,
  client_for = function(_) return nil end, -- the quickdraft client of a buffer
}

local S = { timer = nil, last = nil }
M._state = S -- for tests and debugging

local function stop_timer()
  S.timer = compat.close_timer(S.timer)
end

--- Send the current window's cursor in `bufnr` now, unless it was the last one sent.
function M.report(bufnr)
  if not M.config.enabled() or not api.nvim_buf_is_valid(bufnr) or api.nvim_get_current_buf() ~= bufnr then
    return false
  end
  local client = M.config.client_for(bufnr)
  if not client or not client.initialized then
    return false
  end
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local line = api.nvim_buf_get_lines(bufnr, row - 1, row, false)[1] or ''
  local position = { line = row - 1, character = compat.lsp_index(line, col, client.offset_encoding) }
  local uri = vim.uri_from_bufnr(bufnr)
  local key = table.concat({ client.id, uri, position.line, position.character }, ':')
  if S.last == key then
    return false
  end
  S.last = key
  compat.notify(client, M.METHOD, { textDocument = { uri = uri }, position = position })
  return true
end

--- The cursor moved in `bufnr` (or the buffer was entered): report it once it rests.
function M.moved(bufnr)
  stop_timer()
  S.timer = vim.loop.new_timer()
  S.timer:start(M.config.debounce_ms, 0, vim.schedule_wrap(function()
    stop_timer()
    M.report(bufnr)
  end))
end

--- Forget what was sent (a new server knows nothing) and drop a pending report.
function M.reset()
  stop_timer()
  S.last = nil
end

return M
