#!/usr/bin/env bash
# Installs the real third-party MCP peers the end-to-end tests drive, when
# missing: npm servers + TypeScript SDK, and a Python venv with the `mcp` SDK.
# Prints the peers directory. Idempotent; reuses $GATEHOUSE_PEERS.
set -euo pipefail
PEERS=${GATEHOUSE_PEERS:-$HOME/.cache/gatehouse-peers}
mkdir -p "$PEERS"
cd "$PEERS"
NPM_PKGS=(@modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31
          @modelcontextprotocol/server-memory@2026.8.31 @modelcontextprotocol/sdk@1.32.2)
if [ ! -f npm/.done-v1 ]; then
  mkdir -p npm && (cd npm && { [ -f package.json ] || npm init -y >/dev/null; } \
    && npm install --no-audit --no-fund --loglevel=error "${NPM_PKGS[@]}" >&2 && touch .done-v1)
fi
if [ ! -f venv/.done-v1 ]; then
  python3 -m venv venv && venv/bin/pip install --quiet --disable-pip-version-check "mcp<2" >&2 && touch venv/.done-v1
fi
# The real Claude Code CLI (a native binary; `claude mcp add-json/remove` work
# offline without a login): protect changes ~/.claude.json through it while
# Claude Code runs (tests/e2e/clients.rs).
CLAUDE_CODE=@anthropic-ai/claude-code@2.1.330
if [ ! -f "npm/.done-${CLAUDE_CODE##*/}" ]; then
  mkdir -p npm && (cd npm && { [ -f package.json ] || npm init -y >/dev/null; } \
    && npm install --no-audit --no-fund --loglevel=error "$CLAUDE_CODE" >&2 && touch ".done-${CLAUDE_CODE##*/}")
fi
echo "$PEERS"
