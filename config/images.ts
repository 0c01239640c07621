import { defineGroup, optionalText, setting } from "./setting.js";

/** Where instance images are built from and pushed to (`evalfleet images`, `validate-env`, `start`). */
export interface ImageSettings {
  /** the private registry prefix images are pushed to and pulled from (`host:port`, an ECR registry); absent: local */
  registry?: string;
  /** credentials for that registry, when it wants them */
  registryAuth?: { username: string; password: string; serveraddress: string };
  /** the debootstrapped Debian rootfs the offline base image is made from */
  baseRootfs: string;
}

/** The rootfs folder when none is configured (what the docs' debootstrap line writes). */
export const DEFAULT_BASE_ROOTFS = "/var/lib/efbase-rootfs";

export const imagesGroup = defineGroup({
  name: "images",
  doc: "Instance images: the registry they are pushed to by digest, and the offline base they are built from.",
  settings: {
    registry: setting({
      env: "EVALFLEET_REGISTRY",
      flag: "registry",
      doc: "the private registry instance images are pushed to and pinned in (`127.0.0.1:5000`, `<account>.dkr.ecr.<region>.amazonaws.com`)",
      schema: optionalText,
      defaultDoc: "none: built images stay in the local daemon, pinned by image id",
    }),
    registryUser: setting({
      env: "EVALFLEET_REGISTRY_USER",
      doc: "user name for the registry (with EVALFLEET_REGISTRY_PASSWORD); unset: no credentials sent",
      schema: optionalText,
    }),
    registryPassword: setting({
      env: "EVALFLEET_REGISTRY_PASSWORD",
      doc: "password or token for the registry",
      schema: optionalText,
      secret: true,
    }),
    baseRootfs: setting({
      env: "EVALFLEET_BASE_ROOTFS",
      flag: "rootfs",
      doc: "a debootstrapped bookworm rootfs (`debootstrap --variant=minbase --include=git,patch,python3,python3-pytest,ca-certificates bookworm DIR`) the offline base image is made from",
      schema: optionalText,
      defaultDoc: DEFAULT_BASE_ROOTFS,
    }),
  },
  compile: (v, ctx): ImageSettings => {
    const out: ImageSettings = { baseRootfs: v.baseRootfs ?? DEFAULT_BASE_ROOTFS };
    if (v.registry !== undefined) out.registry = v.registry.replace(/\/+$/, "");
    if ((v.registryUser === undefined) !== (v.registryPassword === undefined))
      ctx.issue(
        "EVALFLEET_REGISTRY_USER,EVALFLEET_REGISTRY_PASSWORD",
        "set both (or neither): the registry's user name and its password or token",
      );
    else if (v.registryUser !== undefined && v.registryPassword !== undefined)
      out.registryAuth = {
        username: v.registryUser,
        password: v.registryPassword,
        serveraddress: out.registry ?? "",
      };
    return out;
  },
});
