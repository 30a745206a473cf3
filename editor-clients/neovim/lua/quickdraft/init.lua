-- quickdraft for Neovim: starts `quickdraft serve` for the configured filetypes and shows its
-- inline completions as ghost text. Neovim 0.7 - 0.11 use quickdraft's own renderer
-- (lua/quickdraft/ghost.lua); 0.12+ use the built-in vim.lsp.inline_completion.
local compat = require('quickdraft.compat')
local cursor = require('quickdraft.cursor')
local ghost = require('quickdraft.ghost')

local api = vim.api
local M = {}

M.defaults = {
  -- Server command; nil: `quickdraft serve` from PATH, else the checkout's .venv.
  cmd = nil,
  filetypes = {
    'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust',
    'c', 'cpp', 'java', 'lua', 'sh', 'ruby', 'php', 'cs', 'kotlin', 'swift', 'scala',
  },
  debounce_ms = 150,
  -- Tell the server where the cursor rests (debounced this long), so it warms its cache there;
  -- false: never. The server's own `warm` setting (in `settings`) turns warming off there.
  cursor_debounce_ms = 100,
  enabled = true,
  -- Sent as initializationOptions and in workspace/didChangeConfiguration, e.g.
  -- { verifier = 'qwen2.5-coder-1.5b', draft = 'none', drafter = 'lookup', budgetMs = 200 }
  settings = {},
  keymaps = {
    accept = '<Tab>', -- falls back to a real <Tab> when nothing is shown
    accept_word = '<M-Right>',
    dismiss = { '<S-Tab>', '<C-]>' },
    trigger = '<M-\\>', -- ask now, without waiting for the debounce
  },
  root_dir = nil, -- default: the current working directory
}

M.config = vim.deepcopy(M.defaults)
M.enabled = true
M.status = nil -- last quickdraft/status notification
M.last_stats = nil -- last quickdraft/stats answer
M.builtin = false -- true when vim.lsp.inline_completion renders

--- The quickdraft checkout the plugin lives in. The real path: packer links a local plugin into
--- its start directory (site/pack/packer/start/quickdraft -> <checkout>/editor-clients/neovim).
local function plugin_root()
  local source = debug.getinfo(1, 'S').source:sub(2) -- .../editor-clients/neovim/lua/quickdraft/init.lua
  source = vim.loop.fs_realpath(source) or source
  return vim.fn.fnamemodify(source, ':p:h:h:h:h:h')
end
M._plugin_root = plugin_root -- for tests

--- The server command: configured, `quickdraft` on PATH, ./.venv, or the .venv of the checkout
--- the plugin lives in (`make setup` there creates it; no need to activate it).
function M.server_cmd()
  if M.config.cmd then
    return M.config.cmd
  end
  if vim.fn.executable('quickdraft') == 1 then
    return { 'quickdraft', 'serve' }
  end
  for _, root in ipairs({ vim.fn.getcwd(), plugin_root() }) do
    local exe = root .. '/.venv/bin/quickdraft'
    if vim.fn.executable(exe) == 1 then
      return { exe, 'serve' }
    end
  end
  return { 'quickdraft', 'serve' }
end

local function server_settings()
  local settings = vim.deepcopy(M.config.settings or {})
  settings.enabled = M.enabled
  return settings
end

local function on_status(_, result)
  if type(result) == 'table' then
    M.status = result
    pcall(vim.cmd, 'doautocmd <nomodeline> User QuickdraftStatus')
    if result.state == 'error' then
      vim.notify('quickdraft: ' .. tostring(result.message), vim.log.levels.ERROR)
    end
  end
end

--- A short text for statuslines: `quickdraft: loading`, `quickdraft 73%`, ...
function M.statusline()
  if not M.enabled then
    return 'quickdraft: off'
  end
  local status = M.status
  if not status then
    return ''
  end
  if status.state == 'ready' or status.state == 'busy' then
    local acceptance = type(status.draftAcceptance) == 'number'
      and string.format(' %d%%', math.floor(status.draftAcceptance * 100 + 0.5)) or ''
    local busy = status.state == 'busy' or (not M.builtin and ghost.busy())
    return (busy and 'quickdraft…' or 'quickdraft') .. acceptance
  end
  return 'quickdraft: ' .. tostring(status.state)
end

--- quickdraft/completionReady: an answer the server finished after its deadline is ready; the
--- renderer asks again when the user is still at that spot (ghost.on_ready). Neovim 0.12's
--- built-in inline completion has no call to ask again: there the notification is ignored and
--- the next keystroke shows the kept answer.
local function on_completion_ready(_, params, ctx)
  if M.builtin then
    return
  end
  local client_id = type(ctx) == 'table' and ctx.client_id or nil
  vim.schedule(function() -- out of the RPC callback: the check reads modes and windows
    local ok, err = pcall(ghost.on_ready, params, client_id)
    if not ok then
      vim.notify('quickdraft: completionReady: ' .. tostring(err), vim.log.levels.DEBUG)
    end
  end)
end

local last_refresh = 0
local refresh_pending = false

--- Keep the draft acceptance in M.status live: re-read the server's figures after completions,
--- at most every 2 s (a completion inside the window is picked up at its end).
local function refresh_acceptance(client)
  if refresh_pending then
    return
  end
  refresh_pending = true
  local wait = math.max(0, last_refresh + 2000 - vim.loop.now())
  vim.defer_fn(function()
    refresh_pending = false
    last_refresh = vim.loop.now()
    if not M.status then
      return
    end
    compat.request(client, 'quickdraft/stats', {}, function(err, result)
      if not err and type(result) == 'table' and M.status and type(result.draftAcceptance) == 'number' then
        M.status.draftAcceptance = result.draftAcceptance
        pcall(vim.cmd, 'doautocmd <nomodeline> User QuickdraftStatus')
      end
    end)
  end, wait)
end

local function set_highlight()
  vim.cmd('highlight default link QuickdraftSuggestion Comment')
end

local function expr_map(bufnr, lhs, when_visible, fallback_action)
  vim.keymap.set('i', lhs, function()
    if M.builtin then
      return fallback_action(lhs)
    end
    if ghost.visible() then
      return '<Cmd>lua require("quickdraft.ghost").' .. when_visible .. '()<CR>'
    end
    return lhs
  end, { buffer = bufnr, expr = true, silent = true, desc = 'quickdraft: ' .. when_visible })
end

local function builtin_accept(lhs)
  -- vim.lsp.inline_completion.get() accepts a shown item and returns true.
  local ok, accepted = pcall(vim.lsp.inline_completion.get)
  if ok and accepted then
    return ''
  end
  return lhs
end

local function set_keymaps(bufnr)
  local keys = M.config.keymaps or {}
  local function list(value)
    if not value then
      return {}
    end
    return type(value) == 'table' and value or { value }
  end
  for _, lhs in ipairs(list(keys.accept)) do
    expr_map(bufnr, lhs, 'accept', builtin_accept)
  end
  if not M.builtin then
    for _, lhs in ipairs(list(keys.accept_word)) do
      expr_map(bufnr, lhs, 'accept_word', function(l) return l end)
    end
    for _, lhs in ipairs(list(keys.dismiss)) do
      expr_map(bufnr, lhs, 'dismiss', function(l) return l end)
    end
  end
  for _, lhs in ipairs(list(keys.trigger)) do
    vim.keymap.set('i', lhs, function()
      if M.builtin then
        pcall(vim.lsp.inline_completion.get)
      else
        ghost.request_now(api.nvim_get_current_buf(), 1)
      end
    end, { buffer = bufnr, silent = true, desc = 'quickdraft: complete now' })
  end
end

local attached = {}

local function attach(bufnr)
  if attached[bufnr] then
    return
  end
  local config = {
    name = 'quickdraft',
    cmd = M.server_cmd(),
    root_dir = M.config.root_dir or vim.fn.getcwd(),
    init_options = server_settings(),
    settings = { quickdraft = server_settings() },
    handlers = { ['quickdraft/status'] = on_status, ['quickdraft/completionReady'] = on_completion_ready },
    on_init = function()
      cursor.reset() -- a new server: tell it where the cursor is, even if it was told before
      vim.schedule(function() cursor.moved(api.nvim_get_current_buf()) end)
    end,
  }
  local client_id = compat.start_client(config, bufnr)
  if not client_id then
    vim.notify('quickdraft: could not start ' .. table.concat(config.cmd, ' ')
      .. ' (set cmd in require("quickdraft").setup{...} or run make setup in the quickdraft checkout)',
      vim.log.levels.ERROR)
    return
  end
  attached[bufnr] = client_id
  set_keymaps(bufnr)
  if M.config.cursor_debounce_ms then
    api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI', 'BufEnter' }, {
      group = api.nvim_create_augroup('quickdraft_cursor_' .. bufnr, { clear = true }),
      buffer = bufnr,
      callback = function() cursor.moved(bufnr) end,
    })
    cursor.moved(bufnr)
  end
  if M.builtin then
    pcall(vim.lsp.inline_completion.enable, M.enabled, { bufnr = bufnr })
    return
  end
  local group = api.nvim_create_augroup('quickdraft_buf_' .. bufnr, { clear = true })
  api.nvim_create_autocmd('TextChangedI', {
    group = group,
    buffer = bufnr,
    callback = function() ghost.on_text_changed(bufnr) end,
  })
  api.nvim_create_autocmd('CursorMovedI', { group = group, buffer = bufnr, callback = ghost.on_cursor_moved })
  api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, { group = group, buffer = bufnr, callback = ghost.reset })
  api.nvim_create_autocmd('BufUnload', {
    group = group,
    buffer = bufnr,
    callback = function()
      attached[bufnr] = nil
      ghost.reset()
    end,
  })
end

local function each_client(fn)
  local seen = {}
  for _, id in pairs(attached) do
    local client = vim.lsp.get_client_by_id(id)
    if client and not seen[id] then
      seen[id] = true
      fn(client)
    end
  end
end

--- Turn completions on or off (nil: toggle). Tells the server too.
function M.toggle(on)
  if on == nil then
    on = not M.enabled
  end
  M.enabled = on
  if not on then
    ghost.reset()
  end
  if M.builtin then
    for bufnr in pairs(attached) do
      pcall(vim.lsp.inline_completion.enable, on, { bufnr = bufnr })
    end
  end
  each_client(function(client)
    compat.notify(client, 'workspace/didChangeConfiguration', { settings = { quickdraft = server_settings() } })
  end)
  vim.notify('quickdraft: ' .. (on and 'on' or 'off'))
  return on
end

local function fmt_pct(value)
  return type(value) == 'number' and string.format('%d%%', math.floor(value * 100 + 0.5)) or '–'
end

local function fmt_num(value, digits)
  return type(value) == 'number' and string.format('%.' .. (digits or 0) .. 'f', value) or '–'
end

function M.format_stats(stats)
  local latency = type(stats.latencyMs) == 'table' and stats.latencyMs or {}
  local lines = {
    string.format('quickdraft: %s requests, drafter %s', tostring(stats.requests or 0), tostring(stats.drafter or '–')),
    string.format('  draft acceptance %s, tau %s tokens/step, accepted by you %s',
      fmt_pct(stats.draftAcceptance), fmt_num(stats.tau, 2), fmt_pct(stats.userAcceptance)),
    string.format('  latency p50 %s ms, p90 %s ms, p99 %s ms', fmt_num(latency.p50), fmt_num(latency.p90), fmt_num(latency.p99)),
  }
  if type(stats.drafters) == 'table' then
    for name, figures in pairs(stats.drafters) do
      lines[#lines + 1] = '  ' .. tostring(name) .. ': ' .. vim.inspect(figures, { newline = ' ', indent = '' })
    end
  end
  return lines
end

--- Ask the server for its figures and show them.
function M.stats()
  local bufnr = api.nvim_get_current_buf()
  local client = ghost.client_for(bufnr)
  if not client then
    for _, id in pairs(attached) do
      client = vim.lsp.get_client_by_id(id)
      if client then
        break
      end
    end
  end
  if not client then
    vim.notify('quickdraft: no server running (open a file of a configured filetype)', vim.log.levels.WARN)
    return
  end
  compat.request(client, 'quickdraft/stats', {}, function(err, result)
    if err then
      vim.notify('quickdraft: stats failed: ' .. tostring(err.message or err), vim.log.levels.ERROR)
      return
    end
    M.last_stats = result
    vim.notify(table.concat(M.format_stats(result or {}), '\n'))
  end, bufnr)
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  if opts and opts.keymaps then
    -- Lists replace the defaults instead of merging index by index.
    for key, value in pairs(opts.keymaps) do
      M.config.keymaps[key] = value
    end
  end
  M.enabled = M.config.enabled ~= false
  M.builtin = compat.has_builtin_inline_completion and M.config.builtin ~= false
  ghost.config.debounce_ms = M.config.debounce_ms
  ghost.config.enabled = function() return M.enabled end
  ghost.config.on_response = refresh_acceptance
  cursor.config.debounce_ms = M.config.cursor_debounce_ms or cursor.config.debounce_ms
  cursor.config.enabled = function() return M.enabled end
  cursor.config.client_for = ghost.client_for

  set_highlight()
  local group = api.nvim_create_augroup('quickdraft', { clear = true })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = set_highlight })
  api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args) attach(args.buf) end,
  })
  api.nvim_create_user_command('QuickdraftToggle', function(args)
    local on = nil
    if args.args == 'on' then
      on = true
    elseif args.args == 'off' then
      on = false
    end
    M.toggle(on)
  end, { nargs = '?', complete = function() return { 'on', 'off' } end, desc = 'quickdraft: toggle completions' })
  api.nvim_create_user_command('QuickdraftStats', M.stats, { desc = 'quickdraft: show stats' })

  -- Buffers opened before setup() ran.
  local wanted = {}
  for _, ft in ipairs(M.config.filetypes) do
    wanted[ft] = true
  end
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and wanted[vim.bo[bufnr].filetype] then
      attach(bufnr)
    end
  end
end

return M
