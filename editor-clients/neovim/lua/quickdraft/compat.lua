-- Differences between Neovim 0.7 and newer releases, in one place.
local M = {}

local has = function(version)
  return vim.fn.has('nvim-' .. version) == 1
end

M.has_011 = has('0.11')
M.has_builtin_inline_completion = has('0.12') and vim.lsp.inline_completion ~= nil

--- UTF-16 code units before byte offset `byte_col` of `line`.
function M.utf16_index(line, byte_col)
  byte_col = math.max(0, math.min(byte_col, #line))
  if M.has_011 then
    return vim.str_utfindex(line, 'utf-16', byte_col, false)
  end
  local _, utf16 = vim.str_utfindex(line, byte_col)
  return utf16
end

--- Byte offset of UTF-16 position `utf16` in `line` (clamped to the line).
function M.byte_index(line, utf16)
  local total = M.utf16_index(line, #line)
  if utf16 >= total then
    return #line
  end
  if M.has_011 then
    return vim.str_byteindex(line, 'utf-16', utf16, false)
  end
  return vim.str_byteindex(line, utf16, true)
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
