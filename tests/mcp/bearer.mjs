// The conformance CLI's MCP client sends no credentials and has no option to, while toolrelay's /mcp
// answers 401 without an API key. `node --import ./bearer.mjs ...` with MCP_BEARER_TOKEN and
// MCP_SERVER_URL set adds `Authorization: Bearer $MCP_BEARER_TOKEN` to every request the CLI sends
// to that URL's origin (the MCP SDK's transports call the global fetch).
const token = process.env.MCP_BEARER_TOKEN;
const origin = process.env.MCP_SERVER_URL ? new URL(process.env.MCP_SERVER_URL).origin : null;

if (token && origin) {
  const unauthenticated = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const request = input instanceof Request ? input : null;
    if (new URL(request ? request.url : String(input)).origin !== origin) {
      return unauthenticated(input, init);
    }
    const headers = new Headers(init?.headers ?? request?.headers);
    headers.set("Authorization", `Bearer ${token}`);
    return unauthenticated(input, { ...init, headers });
  };
}
