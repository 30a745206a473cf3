-- The suggestion quickdraft's ghost-text renderer (quickdraft/ghost.lua) shows: made from the
-- server's InlineCompletionItem, and checked against the line as the user types through it.
-- No editor state here: ghost.lua passes in the buffer, cursor and line, and keeps the result.
local compat = require('quickdraft.compat')

local M = {}

--- The suggestion for `item`, answered for the cursor at (row, anchor_col) of `line`, or nil when
--- it cannot be shown (no text, or a range over other lines).
function M.from_item(bufnr, client_id, encoding, row, anchor_col, line, item)
  local text = item.insertText
  if type(text) == 'table' then
    text = text.value -- a snippet: inserted as plain text
  end
  if type(text) ~= 'string' or text == '' then
    return nil
  end
  local start_col, end_col = anchor_col, anchor_col
  if item.range then
    if item.range.start.line ~= row or item.range['end'].line ~= row then
      return nil
    end
    start_col = compat.lsp_byte_index(line, item.range.start.character, encoding)
    end_col = compat.lsp_byte_index(line, item.range['end'].character, encoding)
  end
  local id
  local command = item.command
  if command and type(command.arguments) == 'table' and type(command.arguments[1]) == 'table' then
    id = command.arguments[1].id
  end
  return {
    bufnr = bufnr,
    client_id = client_id,
    row = row,
    anchor_col = anchor_col,
    start_col = start_col,
    suffix_len = #line - math.max(end_col, anchor_col),
    text = text,
    command = command,
    id = id,
    shown = false,
  }
end

--- Where `sug` stands with the cursor at (row, col) and `line` the text of that row, or nil
--- when the user typed something that does not match it or moved away.
function M.locate(sug, row, col, line)
  if row ~= sug.row or col < sug.anchor_col then
    return nil
  end
  local range_end = #line - sug.suffix_len -- bytes after the range end never change
  if col < sug.start_col or range_end < col then
    return nil
  end
  local typed = line:sub(sug.start_col + 1, col)
  if sug.text:sub(1, #typed) ~= typed or #typed >= #sug.text then
    return nil
  end
  return {
    row = row,
    col = col,
    line = line,
    range_end = range_end,
    typed = typed,
    ghost = sug.text:sub(#typed + 1),
  }
end

return M
