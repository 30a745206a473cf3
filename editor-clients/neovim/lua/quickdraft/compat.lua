-- Differences between Neovim 0.7 and newer releases, in one place.
local M = {}

local has = function(version)
  return vim.fn.has('nvim-' .. version) == 1
end

M.has_011 = has('0.11')
M.has_builtin_inline_completion = has('0.12') and vim.lsp.inline_completion ~= nil

--- Index of byte offset `byte_col` of `line` in the position encoding `encoding` ('utf-8',
--- 'utf-16' or 'utf-32'; nil: 'utf-16'), as LSP positions count characters. A client's encoding
--- is `client.offset_encoding`: 0.7 always takes UTF-16, 0.11 offers UTF-8 first (and pygls
--- servers take it).
function M.lsp_index(line, byte_col, encoding)
  byte_col = math.max(0, math.min(byte_col, #line))
  encoding = encoding or 'utf-16'
  if encoding == 'utf-8' then
    return byte_col
  end
  if M.has_011 then
    return vim.str_utfindex(line, encoding, byte_col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, byte_col)
  return encoding == 'utf-32' and utf32 or utf16
end

--- Byte offset of position `index` (in `encoding`) in `line`, clamped to the line.
function M.lsp_byte_index(line, index, encoding)
  encoding = encoding or 'utf-16'
  if index >= M.lsp_index(line, #line, encoding) then
    return #line
  end
  if encoding == 'utf-8' then
    return math.max(0, index)
  end
  if M.has_011 then
    return vim.str_byteindex(line, encoding, index, false)
  end
  return vim.str_byteindex(line, index, encoding == 'utf-16')
end

--- UTF-16 code units before byte offset `byte_col` of `line`.
function M.utf16_index(line, byte_col)
  return M.lsp_index(line, byte_col, 'utf-16')
end

--- Byte offset of UTF-16 position `utf16` in `line` (clamped to the line).
function M.byte_index(line, utf16)
  return M.lsp_byte_index(line, utf16, 'utf-16')
end

--- The document version the LSP client sent for `bufnr` (0 at didOpen, then b:changedtick of
--- each change); nil when no client has it open.
function M.buf_version(bufnr)
  local versions = vim.lsp.util.buf_versions -- 0.11 answers 0 for any buffer: read it raw
  return versions and rawget(versions, bufnr) or nil
end

--- client:request / client.request (0.11 deprecates the dot form).
function M.request(client, method, params, handler, bufnr)
  if M.has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

function M.notify(client, method, params)
  if M.has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

function M.cancel_request(client, id)
  if M.has_011 then
    return client:cancel_request(id)
  end
  return client.cancel_request(id)
end

--- Handlers are called (err, result, ctx) on every version since 0.5.1.
function M.get_client(id)
  return vim.lsp.get_client_by_id(id)
end

--- Stop and close a libuv timer (nil is fine); returns nil, for `S.timer = compat.close_timer(S.timer)`.
function M.close_timer(timer)
  if timer then
    timer:stop()
    timer:close()
  end
  return nil
end

--- Start (or reuse) the client and attach it to `bufnr`; returns the client id.
function M.start_client(config, bufnr)
  if vim.lsp.start then -- 0.8+
    return vim.lsp.start(config, { bufnr = bufnr })
  end
  M._client_ids = M._client_ids or {}
  local id = M._client_ids[config.name]
  if not id or not vim.lsp.get_client_by_id(id) then
    id = vim.lsp.start_client(config)
    M._client_ids[config.name] = id
  end
  if id then
    vim.lsp.buf_attach_client(bufnr, id)
  end
  return id
end

return M
