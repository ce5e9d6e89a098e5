// node:fs plus the globSync of Node 22, as a stub: the conformance commands toolrelay runs never call it.
import fs from "node:fs";

export * from "node:fs";
export default fs;

export function globSync() {
  throw new Error("fs.globSync needs Node 22 or later (this command of the conformance CLI cannot run on Node 20)");
}
