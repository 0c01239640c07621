import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import { FEATURE_FLAGS } from "./lib/config.js";
import { EvalfleetStack } from "./lib/stack.js";

/**
 * The CDK app: `npx cdk synth` in deploy/ (cdk.json runs this file with tsx). Environment-agnostic, so synthesis
 * needs no AWS account or lookups; inputs come from context (see lib/config.ts).
 */
export function buildApp(
  context: Record<string, unknown> = {},
  opts: { nag?: boolean; cfnValidation?: boolean } = {},
): { app: App; stack: EvalfleetStack } {
  // The built-in CloudFormation validation (a WASM engine, ~8 s) catches cycles; tests of shape may skip it.
  const app = new App({
    context: { ...FEATURE_FLAGS, ...context },
    builtinCloudFormationValidation: opts.cfnValidation ?? true,
  });
  const stack = new EvalfleetStack(app, "Evalfleet", {
    description: "evalfleet: harness evaluation control plane",
  });
  // cdk-nag v3 runs as a validation plugin: synthesis fails on any unacknowledged finding.
  if (opts.nag ?? true) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack };
}

if (import.meta.url === `file://${process.argv[1]}`) buildApp().app.synth();
