#!/usr/bin/env node
// Validates Kubernetes manifests offline: every object of every YAML file given, by its
// apiVersion and kind, against Kubernetes' own object schemas (kubernetes-models: its classes
// check an object with ajv against the JSON schemas generated from Kubernetes' OpenAPI
// document). Those schemas allow fields they do not name, where `kubectl apply` (strict field
// validation) refuses them, so each object's field names are also checked against the
// models' type declarations: a misspelt field fails here too.
//
//   node validate.js FILE...   one line per object ("ok apps/v1 StatefulSet NAME"), a summary;
//                              exit 0 when every object is valid, 1 otherwise
"use strict";

const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

const MODELS = path.join(__dirname, "node_modules");

// The module of an apiVersion's classes: "v1" is the core group's.
function modelsFor(apiVersion) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const name = group === "" ? `kubernetes-models/${version}` : `kubernetes-models/${group}/${version}`;
  try {
    return { name, module: require(name) };
  } catch (e) {
    return { name, module: null };
  }
}

// --- field names, from the models' .d.ts files ---

const declarations = new Map();  // .d.ts path -> {imports, props} (props null: not an interface)

function parseDeclaration(file) {
  if (declarations.has(file)) return declarations.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";$/gm)) {
    for (const name of m[1].split(",").map((s) => s.trim())) imports.set(name, m[2]);
  }
  let props = null;
  const lines = text.split("\n");
  const start = lines.findIndex((l) => /^export interface \w+/.test(l));
  if (start >= 0) {
    props = new Map();
    for (let i = start + 1; i < lines.length && lines[i] !== "}"; i++) {
      const p = /^ {4}"([^"]+)"\??: (.*)$/.exec(lines[i]);
      if (!p) continue;
      let type = p[2];
      if (type === "{") {  // a map: { [key: string]: T; }
        const value = /^ {8}\[key: string\]: (.*);$/.exec(lines[i + 1] || "");
        type = value ? { map: value[1] } : "object";
      } else {
        type = type.replace(/;$/, "");
      }
      props.set(p[1], type);
    }
  }
  const parsed = { imports, props };
  declarations.set(file, parsed);
  return parsed;
}

// The .d.ts file that declares type `name`, as imported by `from` (a .d.ts file).
function declarationOf(name, from) {
  const spec = parseDeclaration(from).imports.get(name);
  if (!spec) return null;
  const base = spec.startsWith(".") ? path.join(path.dirname(from), spec) : path.join(MODELS, spec);
  return fs.existsSync(`${base}.d.ts`) ? `${base}.d.ts` : null;
}

// Pushes "PATH: unknown field NAME" for every field of `value` its type does not declare.
function checkFields(value, type, file, where, errors) {
  if (value === null || value === undefined || typeof type !== "string" && !type.map) return;
  if (type.map) {
    if (typeof value === "object") {
      for (const [k, v] of Object.entries(value)) checkFields(v, type.map, file, `${where}/${k}`, errors);
    }
    return;
  }
  const array = /^Array<(.*)>$/.exec(type);
  if (array) {
    if (Array.isArray(value)) value.forEach((v, i) => checkFields(v, array[1], file, `${where}/${i}`, errors));
    return;
  }
  if (!/^I\w+$/.test(type) || typeof value !== "object" || Array.isArray(value)) return;
  const declaration = declarationOf(type, file);
  if (!declaration) {
    errors.push(`${where || "/"}: no declaration of ${type} to check its fields against`);
    return;
  }
  checkObject(value, declaration, where, errors);
}

function checkObject(value, file, where, errors) {
  const { props } = parseDeclaration(file);
  if (props === null) return;  // a type alias (a quantity, an int-or-string): no fields
  for (const [key, child] of Object.entries(value)) {
    if (!props.has(key)) {
      errors.push(`${where || ""}/${key}: unknown field`);
      continue;
    }
    checkFields(child, props.get(key), file, `${where}/${key}`, errors);
  }
}

// --- one object ---

function validate(object) {
  if (!object || typeof object !== "object" || !object.apiVersion || !object.kind) {
    return { label: "?", errors: ["not a Kubernetes object (no apiVersion or kind)"] };
  }
  const name = object.metadata && object.metadata.name ? object.metadata.name : "(no name)";
  const label = `${object.apiVersion} ${object.kind} ${name}`;
  const models = modelsFor(object.apiVersion);
  const Model = models.module ? models.module[object.kind] : undefined;
  if (typeof Model !== "function" || typeof Model.prototype.validate !== "function") {
    return { label, errors: [`unknown kind: ${models.name} has no ${object.kind}`] };
  }
  const errors = [];
  try {
    new Model(object).validate();
  } catch (e) {
    if (Array.isArray(e.errors)) {
      for (const err of e.errors) errors.push(`${err.instancePath || "/"}: ${err.message}`);
    } else {
      errors.push(String(e.message || e));
    }
  }
  const [group, version] = object.apiVersion.includes("/") ? object.apiVersion.split("/")
                                                             : ["", object.apiVersion];
  const file = path.join(MODELS, "kubernetes-models", group, version, `${object.kind}.d.ts`);
  if (!fs.existsSync(file)) {
    errors.push(`no type declaration ${path.relative(MODELS, file)} to check field names against`);
  } else {
    checkObject(object, file, "", errors);
  }
  return { label, errors };
}

function main(files) {
  if (files.length === 0) {
    console.error("usage: node validate.js FILE...");
    return 2;
  }
  let ok = 0;
  let bad = 0;
  for (const file of files) {
    let documents;
    try {
      documents = yaml.loadAll(fs.readFileSync(file, "utf8"));
    } catch (e) {
      console.log(`FAIL ${file}: ${e.message.split("\n")[0]}`);
      bad++;
      continue;
    }
    const objects = documents.filter((d) => d !== null && d !== undefined);
    if (objects.length === 0) {
      console.log(`FAIL ${file}: no object in it`);
      bad++;
    }
    for (const object of objects) {
      const { label, errors } = validate(object);
      if (errors.length === 0) {
        console.log(`ok ${label}`);
        ok++;
      } else {
        console.log(`FAIL ${label} (${path.basename(file)})`);
        for (const e of errors) console.log(`  ${e}`);
        bad++;
      }
    }
  }
  console.log(`${ok} valid, ${bad} invalid`);
  return bad === 0 ? 0 : 1;
}

process.exitCode = main(process.argv.slice(2));
