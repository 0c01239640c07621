#!/usr/bin/env node
// Loads the TypeScript CLI through tsx in this same process, so signals reach it directly and no build is needed.
import { register } from "tsx/esm/api";

register();
await import("../cli/main.ts");
