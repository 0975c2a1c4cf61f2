// Reading README.md and the book's pages (docs/) for readme.test.mjs: the
// pages in the book's order, their fenced code blocks with the marker before
// each (mdBook's `{{#include}}` expanded), the commands of a shell block with
// the output shown under them, the notation of that output (… stands for what
// varies), and the relative links and heading anchors of a page.

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

const MARKER = /^<!--\s*readme-test:\s*(run|skip)\b:?\s*(.*?)\s*-->\s*$/;

/**
 * Every fenced block: { line (1-based, of the opening fence), lang, text,
 * marker: {kind: 'run', name} | {kind: 'skip', reason} | null }. The marker
 * is an HTML comment on the line before the fence (blank lines between are
 * allowed): `<!-- readme-test: run [NAME] -->` or `<!-- readme-test: skip: REASON -->`.
 */
export function fencedBlocks(markdown) {
  const lines = markdown.split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]);
    if (!open) continue;
    const close = new RegExp(`^ {0,3}${open[2][0]}{${open[2].length},}\\s*$`);
    let j = i + 1;
    while (j < lines.length && !close.test(lines[j])) j++;
    const body = lines.slice(i + 1, j).map((l) => l.replace(new RegExp(`^ {0,${open[1].length}}`), ''));
    blocks.push({ line: i + 1, lang: open[3].toLowerCase(), text: `${body.join('\n')}\n`, marker: markerBefore(lines, i) });
    i = j;
  }
  return blocks;
}

function markerBefore(lines, fence) {
  let k = fence - 1;
  while (k >= 0 && lines[k].trim() === '') k--;
  const m = k >= 0 ? MARKER.exec(lines[k].trim()) : null;
  if (!m) return null;
  return m[1] === 'run' ? { kind: 'run', name: m[2] || null } : { kind: 'skip', reason: m[2] };
}

/**
 * The commands of a shell block, each { text, expect, inline }: `expect` is
 * the output shown in the comment lines right under it (starting with `# {`
 * or `# [`, continued by `#` lines indented further), `inline` a comment on
 * its own line. A command runs on over quoted line breaks, a trailing
 * backslash and a here-document.
 */
export function shellCommands(text) {
  const cmds = [];
  let cur = null;
  let quote = null;
  let heredoc = null;
  let last = null; // the command just before, while only its output comment follows
  let expecting = false;
  for (const line of text.split('\n')) {
    if (heredoc) {
      cur.text += `\n${line}`;
      if (line.trim() === heredoc) { heredoc = null; finish(); }
      continue;
    }
    if (cur) {
      cur.text += `\n${line}`;
    } else {
      const t = line.trim();
      if (t === '') { last = null; continue; }
      if (t.startsWith('#')) {
        const c = t.replace(/^#\s?/, '');
        if (expecting && /^\s/.test(c)) last.expect += `\n${c}`;
        else if (last && !last.expect && /^[[{]/.test(c)) { last.expect = c; expecting = true; }
        else { last = null; expecting = false; }
        continue;
      }
      cur = { text: line, expect: null, inline: null };
    }
    scanLine(line);
    if (!quote && !heredoc && !line.endsWith('\\')) finish();
  }
  if (cur) finish();
  return cmds;

  function finish() {
    cmds.push(cur);
    last = cur;
    expecting = false;
    cur = null;
  }

  // Quotes that stay open, a comment after the command, a here-document's word.
  function scanLine(line) {
    for (let k = 0; k < line.length; k++) {
      const ch = line[k];
      if (quote === "'") { if (ch === "'") quote = null; continue; }
      if (quote === '"') { if (ch === '\\') k++; else if (ch === '"') quote = null; continue; }
      if (ch === '\\') { k++; continue; }
      if (ch === "'" || ch === '"') { quote = ch; continue; }
      if (ch === '#' && (k === 0 || /\s/.test(line[k - 1]))) { cur.inline = line.slice(k + 1).trim(); return; }
      const here = ch === '<' ? /^<<-?\s*['"]?(\w+)['"]?/.exec(line.slice(k)) : null;
      if (here) heredoc = here[1];
    }
  }
}

/** A script that prints a separator line before each command, so its output can be told apart. */
export function separatedScript(cmds) {
  return cmds.map((c, i) => `printf '\\n\\036readme-cmd ${i}\\n'\n${c.text}`).join('\n');
}

/** The output of each command of a `separatedScript`, by index. */
export function outputsByCommand(stdout) {
  const parts = stdout.split(/\n\x1ereadme-cmd (\d+)\n/);
  const out = new Map();
  for (let i = 1; i < parts.length; i += 2) out.set(Number(parts[i]), parts[i + 1]);
  return out;
}

/**
 * README's JSON notation as JSON: a bare … is a value that may be anything
 * (null) or the rest of a list or object (dropped); … inside a string stays.
 */
export function looseJson(text) {
  let out = '';
  let inString = false;
  for (let k = 0; k < text.length; k++) {
    const ch = text[k];
    if (inString) {
      out += ch;
      if (ch === '\\') out += text[++k];
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    if (ch !== '…') { out += ch; continue; }
    const before = out.trimEnd();
    if (before.endsWith(':')) out = `${before}null`;
    else out = before.endsWith(',') ? before.slice(0, -1) : before;
  }
  return JSON.parse(out);
}

/** Lists that the README shows with an element but may rightly be empty. */
const MAY_BE_EMPTY = new Set(['recentFailures']);

/**
 * Why `actual` does not have the shape `expected` shows, or null: every key
 * shown is there; strings are equal (… inside one matches anything); numbers
 * are numbers; null is anything; each element shown matches some element.
 */
export function shapeMismatch(expected, actual, path = '$') {
  if (expected === null) return null;
  const got = () => `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)?.slice(0, 300)}`;
  if (typeof expected === 'string') {
    return typeof actual === 'string' && glob(expected).test(actual) ? null : got();
  }
  if (typeof expected === 'number') return typeof actual === 'number' ? null : got();
  if (typeof expected === 'boolean') return actual === expected ? null : got();
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return got();
    if (actual.length === 0) {
      return expected.length === 0 || MAY_BE_EMPTY.has(path.split('.').at(-1)) ? null : `${path}: an empty list`;
    }
    for (const [i, e] of expected.entries()) {
      const misses = actual.map((a, j) => shapeMismatch(e, a, `${path}[${j}]`));
      if (!misses.includes(null)) return `${path}[${i}] matches no element: ${misses[Math.min(i, misses.length - 1)]}`;
    }
    return null;
  }
  if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return got();
  for (const [key, value] of Object.entries(expected)) {
    if (!(key in actual)) return `${path}: no "${key}" in ${JSON.stringify(actual).slice(0, 300)}`;
    const miss = shapeMismatch(value, actual[key], `${path}.${key}`);
    if (miss) return miss;
  }
  return null;
}

/** A whole-string pattern: … matches anything, a run of spaces any run of white space. */
export function glob(pattern, flags = '') {
  const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\s+/g, '\\s+');
  return new RegExp(`^${pattern.split('…').map(esc).join('[\\s\\S]*?')}$`, flags);
}

/** Whether `texts`, each a `glob` pattern, appear in `output` in that order. Returns the first missing one or null. */
export function missingInOrder(texts, output) {
  let from = 0;
  for (const t of texts) {
    const re = new RegExp(glob(t).source.slice(1, -1), 'g');
    re.lastIndex = from;
    const m = re.exec(output);
    if (!m) return t;
    from = m.index + m[0].length;
  }
  return null;
}

/**
 * The pages whose blocks run, in order: README.md, then every page that
 * docs/SUMMARY.md lists, in its order. Paths are relative to `root`.
 */
export function bookPages(root) {
  const summary = readFileSync(join(root, 'docs', 'SUMMARY.md'), 'utf8');
  const pages = [];
  for (const m of stripCode(summary).matchAll(/\]\(([^)\s]+\.md)\)/g)) {
    const page = join('docs', m[1]);
    if (!pages.includes(page)) pages.push(page);
  }
  return ['README.md', ...pages];
}

/**
 * A block's text with mdBook's `{{#include PATH}}` lines replaced by the
 * file (relative to the page's folder `dir`), as mdBook includes it: whole
 * (anchor lines dropped), `PATH:FROM:TO` lines (1-based, either may be
 * left out), `PATH:LINE`, or `PATH:NAME` between `ANCHOR: NAME` and
 * `ANCHOR_END: NAME`. A missing file or anchor throws.
 */
export function expandIncludes(text, dir) {
  return text.replace(/\{\{#include\s+([^}\s]+)\s*\}\}/g, (_, spec) => {
    const [path, ...range] = spec.split(':');
    const file = join(dir, path);
    if (!existsSync(file)) throw new Error(`{{#include ${spec}}}: no file ${file}`);
    const lines = readFileSync(file, 'utf8').replace(/\n$/, '').split('\n');
    const isAnchor = (l) => /ANCHOR(_END)?:\s*[\w-]+/.test(l);
    let picked;
    if (range.length === 0) {
      picked = lines.filter((l) => !isAnchor(l));
    } else if (range.length === 1 && /^[A-Za-z_][\w-]*$/.test(range[0])) {
      const name = range[0];
      const from = lines.findIndex((l) => new RegExp(`ANCHOR:\\s*${name}\\b`).test(l));
      const to = lines.findIndex((l, i) => i > from && new RegExp(`ANCHOR_END:\\s*${name}\\b`).test(l));
      if (from < 0 || to < 0) throw new Error(`{{#include ${spec}}}: no anchor ${name} in ${file}`);
      picked = lines.slice(from + 1, to).filter((l) => !isAnchor(l));
    } else {
      const from = range[0] ? Number(range[0]) : 1;
      const to = range.length === 1 ? from : (range[1] ? Number(range[1]) : lines.length);
      picked = lines.slice(from - 1, to);
    }
    return picked.join('\n');
  });
}

/** Every `{{#include PATH…}}` of a page, outside inline code: { line, spec }. */
export function includes(markdown) {
  const out = [];
  for (const [i, l] of markdown.split('\n').entries()) {
    for (const m of l.replace(/`[^`]*`/g, '').matchAll(/\{\{#include\s+([^}\s]+)\s*\}\}/g)) out.push({ line: i + 1, spec: m[1] });
  }
  return out;
}

/** The text with fenced blocks blanked (lines kept) and inline code removed: what links are read from. */
function stripCode(markdown) {
  const lines = markdown.split('\n');
  let fence = null;
  return lines.map((l) => {
    const open = /^ {0,3}(`{3,}|~{3,})/.exec(l);
    if (fence) {
      if (open && l.trim().startsWith(fence)) fence = null;
      return '';
    }
    if (open) {
      fence = open[1];
      return '';
    }
    return l.replace(/(`+)[\s\S]*?\1/g, '');
  }).join('\n');
}

/**
 * The relative links and images of a page: { line, target } for each
 * `[text](target)` whose target names no scheme (`https:`, `mailto:`).
 */
export function relativeLinks(markdown) {
  const out = [];
  for (const [i, l] of stripCode(markdown).split('\n').entries()) {
    for (const m of l.matchAll(/\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)/g)) {
      if (!/^[a-z][a-z0-9+.-]*:/i.test(m[1])) out.push({ line: i + 1, target: m[1] });
    }
  }
  return out;
}

/**
 * The anchors of a page's headings, as GitHub and mdBook make them: the
 * heading's text without its markup, lower case, spaces as `-`, other
 * punctuation dropped; a repeated one gets `-1`, `-2`, ….
 */
export function headingAnchors(markdown) {
  const seen = new Map();
  const anchors = new Set();
  for (const l of stripCodeBlocks(markdown)) {
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(l);
    if (!h) continue;
    const text = h[1].replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '').replace(/[`*]/g, '');
    const base = [...text.toLowerCase()].map((c) => (/[\p{L}\p{N}_-]/u.test(c) ? c : /\s/.test(c) ? '-' : '')).join('');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

function stripCodeBlocks(markdown) {
  let fence = null;
  return markdown.split('\n').filter((l) => {
    const open = /^ {0,3}(`{3,}|~{3,})/.exec(l);
    if (fence) {
      if (open && l.trim().startsWith(fence)) fence = null;
      return false;
    }
    if (open) fence = open[1];
    return !open;
  });
}

/**
 * Why a relative link of `page` (a path under `root`) leads nowhere, or
 * null: its file or folder must exist, and an anchor into a Markdown page
 * (or into `page` itself) must name one of its headings.
 */
export function brokenLink(root, page, target) {
  const [path, anchor] = target.split('#');
  const file = path ? join(root, dirname(page), decodeURI(path)) : join(root, page);
  if (!existsSync(file)) return `no file ${relative(root, file)}`;
  if (anchor === undefined || !file.endsWith('.md')) return null;
  return headingAnchors(readFileSync(file, 'utf8')).has(anchor) ? null : `no heading #${anchor} in ${relative(root, file)}`;
}
