-- quickdraft's own ghost-text renderer for Neovim 0.7 - 0.11: debounced
-- textDocument/inlineCompletion requests in insert mode, the first line as virtual text at
-- the cursor and the rest as virtual lines, accept / accept word / dismiss. What a suggestion
-- is, and where it stands as the user types, is quickdraft/suggestion.lua.
local compat = require('quickdraft.compat')
local suggestion = require('quickdraft.suggestion')

local api = vim.api
local M = {}

M.ns = api.nvim_create_namespace('quickdraft')
M.hl_group = 'QuickdraftSuggestion'

-- One insert-mode session at a time: all state lives here.
local S = {
  timer = nil, -- debounce timer
  pending = nil, -- { client_id, request_id } of the request in flight
  seq = 0, -- bumped by every keystroke; responses for older numbers are dropped
  sug = nil, -- the suggestion: see suggestion.from_item
}
M._state = S -- for tests and debugging

M.config = {
  debounce_ms = 150,
  enabled = function() return true end,
  on_response = function(_) end, -- called with the client after every answer
}

local function client_for(bufnr)
  if vim.lsp.get_clients then -- 0.10+
    return vim.lsp.get_clients({ bufnr = bufnr, name = 'quickdraft' })[1]
  end
  for _, client in pairs(vim.lsp.buf_get_clients(bufnr)) do
    if client.name == 'quickdraft' then
      return client
    end
  end
  return nil
end
M.client_for = client_for

local function in_insert_mode()
  return vim.fn.mode():sub(1, 1) == 'i'
end

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2] -- 0-based row, byte column
end

local function current_line(bufnr, row)
  return api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
end

local function stop_timer()
  S.timer = compat.close_timer(S.timer)
end

local function cancel_pending()
  if S.pending then
    local client = compat.get_client(S.pending.client_id)
    if client then
      pcall(compat.cancel_request, client, S.pending.request_id)
    end
    S.pending = nil
  end
end

local function clear_marks(bufnr)
  if bufnr and api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- Forget the suggestion and its rendering.
function M.clear()
  if S.sug then
    clear_marks(S.sug.bufnr)
  end
  S.sug = nil
end

--- Stop everything in flight: timer, request, suggestion.
function M.reset()
  S.seq = S.seq + 1
  stop_timer()
  cancel_pending()
  M.clear()
end

--- How `text` looks in virtual text: tabs as spaces, control characters as ^X (as Neovim
--- shows them in the buffer; a NUL would otherwise turn the string into a Blob).
function M.display(text)
  text = text:gsub('\t', string.rep(' ', vim.bo.tabstop > 0 and vim.bo.tabstop or 8))
  text = text:gsub('[%z\1-\31\127]', function(c)
    return c == '\127' and '^?' or '^' .. string.char(c:byte() + 64)
  end)
  return text
end
local untab = M.display

--- Where the suggestion stands against the buffer now, or nil when the user typed something
--- that does not match it, moved away, or left insert mode.
local function locate()
  local sug = S.sug
  if not sug or not in_insert_mode() or api.nvim_get_current_buf() ~= sug.bufnr then
    return nil
  end
  local row, col = cursor()
  return suggestion.locate(sug, row, col, current_line(sug.bufnr, row))
end

--- Draw the suggestion (or remove it when it no longer fits). Returns true when shown.
function M.render()
  local sug = S.sug
  if not sug then
    return false
  end
  clear_marks(sug.bufnr)
  local at = locate()
  if not at or vim.fn.pumvisible() == 1 then
    if not at then
      S.sug = nil
    end
    return false
  end
  local lines = vim.split(at.ghost, '\n', { plain = true })
  local after = at.line:sub(at.range_end + 1) -- text behind the replaced range
  local covered = at.line:sub(at.col + 1) -- what the overlay draws over
  local first = untab(lines[1])
  local virt_text = { { first, M.hl_group } }
  local virt_lines = {}
  if #lines == 1 then
    -- The line as it will read after accepting: ghost text, then the text behind the range.
    if after ~= '' then
      table.insert(virt_text, { untab(after), 'Normal' })
    end
  else
    for i = 2, #lines do
      virt_lines[#virt_lines + 1] = { { untab(lines[i]), M.hl_group } }
    end
    if after ~= '' then
      table.insert(virt_lines[#virt_lines], { untab(after), 'Normal' })
    end
  end
  -- Overlay text must cover the characters it replaces on screen.
  local shown = 0
  for _, chunk in ipairs(virt_text) do
    shown = shown + vim.fn.strdisplaywidth(chunk[1])
  end
  local hidden = vim.fn.strdisplaywidth(untab(covered))
  if hidden > shown then
    table.insert(virt_text, { string.rep(' ', hidden - shown), 'Normal' })
  end
  local opts = {
    virt_text = virt_text,
    virt_text_pos = 'overlay',
    hl_mode = 'combine',
  }
  if #virt_lines > 0 then
    opts.virt_lines = virt_lines
  end
  sug.extmark = api.nvim_buf_set_extmark(sug.bufnr, M.ns, at.row, at.col, opts)
  if not sug.shown and sug.id then
    sug.shown = true
    local client = compat.get_client(sug.client_id)
    if client then
      compat.notify(client, 'quickdraft/didShowCompletion', { id = sug.id })
    end
  end
  return true
end

--- True while a completion request is on its way.
function M.busy()
  return S.pending ~= nil
end

--- True when a suggestion is on screen (what the accept/dismiss keys check).
function M.visible()
  return S.sug ~= nil and locate() ~= nil
end

--- The text a visible suggestion would still insert, for tests and statuslines.
function M.ghost_text()
  local at = locate()
  return at and at.ghost or nil
end

--- Ask the server now. `trigger_kind`: 1 invoked (a key), 2 automatic (typing).
function M.request_now(bufnr, trigger_kind)
  if not bufnr or bufnr == 0 then
    bufnr = api.nvim_get_current_buf()
  end
  if not M.config.enabled() or not in_insert_mode() or api.nvim_get_current_buf() ~= bufnr then
    return false
  end
  local client = client_for(bufnr)
  if not client then
    return false
  end
  cancel_pending()
  S.seq = S.seq + 1
  local my_seq = S.seq
  local row, col = cursor()
  local line = current_line(bufnr, row)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = compat.lsp_index(line, col, client.offset_encoding) },
    context = { triggerKind = trigger_kind or 2 },
  }
  local client_id, encoding = client.id, client.offset_encoding
  local ok, request_id = compat.request(client, 'textDocument/inlineCompletion', params, function(err, result)
    if my_seq ~= S.seq then
      return -- the user typed since: a newer request is on its way
    end
    S.pending = nil
    M.config.on_response(client)
    if err or not result then
      return
    end
    local items = result.items or result
    local cur_row, cur_col = cursor()
    if api.nvim_get_current_buf() ~= bufnr or cur_row ~= row or cur_col < col then
      return
    end
    for _, item in ipairs(items) do
      M.clear()
      S.sug = suggestion.from_item(bufnr, client_id, encoding, row, col, line, item)
      if S.sug and M.render() then
        return
      end
    end
  end, bufnr)
  if ok and request_id then
    S.pending = { client_id = client_id, request_id = request_id }
  end
  return ok
end

--- Same document? URIs compared as file names (one spelling of a path), else as sent.
local function same_document(bufnr, uri)
  local mine = vim.uri_from_bufnr(bufnr)
  if mine == uri then
    return true
  end
  local ok_a, a = pcall(vim.uri_to_fname, mine)
  local ok_b, b = pcall(vim.uri_to_fname, uri)
  return ok_a and ok_b and a == b
end

M.ready_count = 0 -- completionReady notifications that led to a request (tests, debugging)

--- `quickdraft/completionReady {textDocument: {uri, version}, position}`: the server answered
--- a request late (empty at its deadline), kept decoding, and has the answer now. If the user
--- is still there (insert mode, the current buffer, the version the LSP client last sent, the
--- cursor at that position in the client's position encoding) ask again at once: the server
--- serves the kept answer without a model pass. Anything else, malformed params included, is
--- ignored. Returns true when it asked.
function M.on_ready(params, client_id)
  if type(params) ~= 'table' or type(params.textDocument) ~= 'table' or type(params.position) ~= 'table' then
    return false
  end
  local uri, version = params.textDocument.uri, params.textDocument.version
  local line, character = params.position.line, params.position.character
  if type(uri) ~= 'string' or type(version) ~= 'number' or type(line) ~= 'number' or type(character) ~= 'number' then
    return false
  end
  if not M.config.enabled() or not in_insert_mode() then
    return false
  end
  local bufnr = api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if not client or (client_id ~= nil and client.id ~= client_id) then
    return false
  end
  if compat.buf_version(bufnr) ~= version or not same_document(bufnr, uri) then
    return false
  end
  local row, col = cursor()
  if row ~= line or compat.lsp_index(current_line(bufnr, row), col, client.offset_encoding) ~= character then
    return false
  end
  stop_timer() -- a debounced request for this very spot would ask the same
  if not M.request_now(bufnr, 2) then
    return false
  end
  M.ready_count = M.ready_count + 1
  return true
end

--- Debounced request after typing.
function M.schedule(bufnr)
  S.seq = S.seq + 1
  stop_timer()
  cancel_pending()
  if not M.config.enabled() then
    return
  end
  local timer = vim.loop.new_timer()
  S.timer = timer
  timer:start(M.config.debounce_ms, 0, vim.schedule_wrap(function()
    if S.timer == timer then
      stop_timer()
      M.request_now(bufnr, 2)
    end
  end))
end

--- TextChangedI: keep a suggestion the user is typing through, else ask again.
function M.on_text_changed(bufnr)
  if S.sug and M.render() then
    return
  end
  M.clear()
  M.schedule(bufnr)
end

--- CursorMovedI: drop a suggestion the cursor left.
function M.on_cursor_moved()
  if S.sug and not locate() then
    M.clear()
  end
end

local function report_accept(sug)
  local client = compat.get_client(sug.client_id)
  if client and sug.command and sug.command.command then
    compat.request(client, 'workspace/executeCommand', {
      command = sug.command.command,
      arguments = sug.command.arguments,
    }, function() end, sug.bufnr)
  end
end

--- Where the visible suggestion stands, and the suggestion; nil when none is visible.
local function shown()
  local at = locate()
  if at then
    return at, S.sug
  end
end

--- Insert the whole suggestion. Returns false when none is visible.
function M.accept()
  local at, sug = shown()
  if not at then return false end
  local lines = vim.split(sug.text, '\n', { plain = true })
  M.reset()
  api.nvim_buf_set_text(sug.bufnr, at.row, sug.start_col, at.row, at.range_end, lines)
  local last_row = at.row + #lines -- 1-based row of the last inserted line
  local last_col = #lines == 1 and (sug.start_col + #lines[1]) or #lines[#lines]
  api.nvim_win_set_cursor(0, { last_row, last_col })
  report_accept(sug)
  return true
end

--- Insert the suggestion up to the end of the next word; the rest stays shown.
function M.accept_word()
  local at, sug = shown()
  if not at then return false end
  local piece = at.ghost:match('^%s*[%w_]+') or at.ghost:match('^%s*[^%w_%s]+') or at.ghost:match('^%s+')
    or at.ghost:sub(1, 1)
  if #piece >= #at.ghost then
    return M.accept()
  end
  local lines = vim.split(piece, '\n', { plain = true })
  api.nvim_buf_set_text(sug.bufnr, at.row, at.col, at.row, at.col, lines)
  if #lines > 1 then
    -- The suggestion now continues on a new line: start over from there.
    M.reset()
    api.nvim_win_set_cursor(0, { at.row + #lines, #lines[#lines] })
  else
    api.nvim_win_set_cursor(0, { at.row + 1, at.col + #piece })
    M.render()
  end
  local client = compat.get_client(sug.client_id)
  if client and sug.id then
    local accepted = sug.text:sub(1, #at.typed + #piece)
    compat.notify(client, 'quickdraft/didPartiallyAcceptCompletion', {
      id = sug.id,
      acceptedLength = compat.utf16_index(accepted, #accepted),
    })
  end
  return true
end

--- Hide the suggestion. Returns false when none was visible.
function M.dismiss()
  local was = M.visible()
  M.reset()
  return was
end

return M
