// Module resolution hook (see register.mjs): "fs" imported by the conformance package is fs.mjs.
const SUBSTITUTE = new URL("./fs.mjs", import.meta.url).href;
const PACKAGE = "/node_modules/@modelcontextprotocol/conformance/";

export async function resolve(specifier, context, nextResolve) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL?.includes(PACKAGE)) {
    return { url: SUBSTITUTE, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
