#!/usr/bin/env bash
# Installs what the editor-client tests need (filled in by the editor-clients work).
set -euo pipefail
