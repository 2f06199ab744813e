// The streamc extension: starts `streamc lsp` (the language server, over stdin and stdout) for
// every .stream file, and stops it when VS Code deactivates the extension.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

/** @type {LanguageClient | undefined} */
let client;

function activate() {
  const command = vscode.workspace.getConfiguration("streamc").get("path") || "streamc";
  const serverOptions = { command, args: ["lsp"], transport: TransportKind.stdio };
  const clientOptions = { documentSelector: [{ scheme: "file", language: "streamc" }] };
  client = new LanguageClient("streamc", "streamc language server", serverOptions, clientOptions);
  return client.start().catch((err) => {
    vscode.window.showErrorMessage(
      `streamc: could not start "${command} lsp" (set streamc.path to the streamc executable): ${err.message || err}`,
    );
  });
}

function deactivate() {
  const running = client;
  client = undefined;
  // `stop` rejects when the server never started (e.g. no streamc executable).
  return running && running.isRunning() ? running.stop() : undefined;
}

module.exports = { activate, deactivate };
