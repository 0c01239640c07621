/**
 * A minimal XML reader for doctest's `-r=xml` reporter (the official parser uses ElementTree).
 * Elements, attributes, text, comments, CDATA, processing instructions and the five entities plus
 * numeric references. Malformed input throws, as `ET.fromstring` raises ParseError.
 */
import { ParserCrash } from "../pycompat.js";

export interface XmlElement {
  tag: string;
  attrs: Map<string, string>;
  children: XmlElement[];
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decodeEntities(s: string): string {
  return s.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[A-Za-z]+);/g, (whole, name: string) => {
    if (name.startsWith("#x")) return String.fromCodePoint(Number.parseInt(name.slice(2), 16));
    if (name.startsWith("#")) return String.fromCodePoint(Number.parseInt(name.slice(1), 10));
    const v = Object.hasOwn(ENTITIES, name) ? ENTITIES[name] : undefined;
    if (v === undefined) throw new ParserCrash(`ParseError: undefined entity ${whole}`);
    return v;
  });
}

const TAG = /<(\/?)([A-Za-z_][\w.:-]*)((?:\s+[\w.:-]+\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(\/?)>/y;
const ATTR = /([\w.:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')/g;

/** Parse one XML document and return its root element. */
// Characters XML 1.0 forbids anywhere (expat rejects them, so ElementTree does too).
const INVALID_CHAR =
  /[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const BARE_AMP = /&(?!#x[0-9a-fA-F]+;|#[0-9]+;|[A-Za-z_][\w.-]*;)/;

function checkCharData(text: string): void {
  if (INVALID_CHAR.test(text)) throw new ParserCrash("ParseError: not well-formed (invalid token)");
  if (BARE_AMP.test(text)) throw new ParserCrash("ParseError: not well-formed (bare &)");
  decodeEntities(text);
}

export function parseXml(xml: string): XmlElement {
  if (INVALID_CHAR.test(xml)) throw new ParserCrash("ParseError: not well-formed (invalid token)");
  const stack: XmlElement[] = [];
  let root: XmlElement | null = null;
  let i = 0;
  while (i < xml.length) {
    const lt = xml.indexOf("<", i);
    const text = xml.slice(i, lt === -1 ? xml.length : lt);
    if (stack.length > 0) checkCharData(text);
    else if (text.trim() !== "") throw new ParserCrash("ParseError: text outside the document element");
    if (lt === -1) break;
    i = lt;
    if (xml.startsWith("<!--", i)) {
      i = skipPast(xml, i, "-->");
      continue;
    }
    if (xml.startsWith("<![CDATA[", i)) {
      i = skipPast(xml, i, "]]>");
      continue;
    }
    if (xml.startsWith("<?", i) || xml.startsWith("<!", i)) {
      i = skipPast(xml, i, ">");
      continue;
    }
    TAG.lastIndex = i;
    const m = TAG.exec(xml);
    if (!m) throw new ParserCrash(`ParseError: not well-formed at offset ${i}`);
    i = TAG.lastIndex;
    const [, closing, tag, attrText, selfClosing] = m as unknown as [string, string, string, string, string];
    if (closing) {
      const open = stack.pop();
      if (!open || open.tag !== tag) throw new ParserCrash(`ParseError: mismatched tag </${tag}>`);
      continue;
    }
    if (root !== null && stack.length === 0) throw new ParserCrash("ParseError: junk after document element");
    const attrs = new Map<string, string>();
    for (const a of attrText.matchAll(ATTR)) {
      // XML attribute-value normalisation: literal tabs and newlines read as spaces.
      const raw = a[2] ?? a[3] ?? "";
      if (raw.includes("<")) throw new ParserCrash("ParseError: '<' in an attribute value");
      checkCharData(raw);
      attrs.set(a[1] as string, decodeEntities(raw.replace(/[\t\n\r]/g, " ")));
    }
    const el: XmlElement = { tag, attrs, children: [] };
    const parent = stack.at(-1);
    if (parent) parent.children.push(el);
    else root = el;
    if (!selfClosing) stack.push(el);
  }
  if (root === null || stack.length > 0) throw new ParserCrash("ParseError: no element found");
  return root;
}

function skipPast(xml: string, from: number, end: string): number {
  const j = xml.indexOf(end, from);
  if (j === -1) throw new ParserCrash("ParseError: unclosed token");
  return j + end.length;
}

/** ElementTree `findall(".//tag")`: every descendant with that tag, in document order. */
export function findAllDescendants(el: XmlElement, tag: string): XmlElement[] {
  const out: XmlElement[] = [];
  const walk = (e: XmlElement): void => {
    for (const c of e.children) {
      if (c.tag === tag) out.push(c);
      walk(c);
    }
  };
  walk(el);
  return out;
}
