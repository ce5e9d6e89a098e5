// The conformance CLI imports `globSync` from "fs" by name, which Node 20 does not have (it came in
// Node 22), so on Node 20 the CLI does not even load; only its tier-check command ever calls it.
// `node --import ./node20/register.mjs ...` makes "fs" resolve, for the CLI's own modules, to a copy
// of node:fs that adds a globSync refusing to run. On a Node with fs.globSync it changes nothing.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./hooks.mjs", import.meta.url);
}
