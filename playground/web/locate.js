// Finds the line of a field path (`spec.subsets[1].maxReplicas`) in block-style YAML,
// so validation errors from core can be shown next to the offending line. Paths use
// v1beta1 field names; v1alpha1 spellings are tried too. Returns a 1-based line, the
// deepest part of the path it could find, or null.

const ALIASES = {
  requiredNodeSelector: ["requiredNodeSelectorTerm"],
  preferredNodeSelector: ["preferredNodeSelectorTerms"],
};

export function parsePath(path) {
  const segs = [];
  for (const part of path.split(".")) {
    const m = part.match(/^([^[]*)((?:\[\d+\])*)$/);
    if (!m) return segs;
    if (m[1]) segs.push(m[1]);
    for (const idx of m[2].matchAll(/\[(\d+)\]/g)) segs.push(Number(idx[1]));
  }
  return segs;
}

// Every key and list dash of a line with its column: "  - name: a" → dash@2, name@4.
function tokens(line, lineNo) {
  const out = [];
  let col = 0;
  while (line[col] === " ") col++;
  if (col >= line.length || line[col] === "#") return out;
  while (line.startsWith("- ", col) || line.slice(col) === "-") {
    out.push({ line: lineNo, col, dash: true });
    col += 2;
    while (line[col] === " ") col++;
  }
  const key = line.slice(col).match(/^("[^"]*"|'[^']*'|[^\s:{}[\],#][^:#]*?)\s*:(\s|$)/);
  if (key) out.push({ line: lineNo, col, key: key[1].replace(/^["']|["']$/g, "") });
  return out;
}

function workloadSpreadDoc(lines) {
  let start = 0;
  for (let i = 0; i <= lines.length; i++) {
    if (i === lines.length || /^---/.test(lines[i])) {
      if (lines.slice(start, i).some((l) => /^kind:\s*WorkloadSpread\b/.test(l))) return [start, i];
      start = i + 1;
    }
  }
  return [0, lines.length];
}

export function locate(text, path) {
  const lines = text.split("\n");
  const [from, to] = workloadSpreadDoc(lines);
  const toks = [];
  for (let i = from; i < to; i++) toks.push(...tokens(lines[i], i));
  // The current node: tokens after it are toks[lo..hi), its own token is `node`.
  let lo = 0, hi = toks.length, node = null;
  for (const seg of parsePath(path)) {
    const wantDash = typeof seg === "number";
    // A sequence may sit at its key's own indentation (`subsets:` / `- name:`).
    const below = (t) => node === null || t.col > node.col ||
      (wantDash && t.dash && !node.dash && t.col === node.col);
    const level = toks.slice(lo, hi).map((t, i) => ({ ...t, i: lo + i }))
      .filter((t) => !!t.dash === wantDash && below(t));
    if (!level.length) break;
    const top = Math.min(...level.map((t) => t.col));
    const peers = level.filter((t) => t.col === top);
    const names = wantDash ? [] : [seg, ...(ALIASES[seg] ?? [])];
    // Not found (e.g. flow style `- {key: zone}`): the parent's line is the best answer.
    const hit = wantDash ? peers[seg] : peers.find((t) => names.includes(t.key));
    if (!hit) break;
    node = hit;
    lo = hit.i + 1;
    const ends = (t) => t.line > hit.line &&
      (t.col < hit.col || (t.col === hit.col && !(t.dash && !hit.dash)));
    hi = toks.findIndex((t, i) => i >= lo && ends(t));
    if (hi < 0) hi = toks.length;
  }
  const found = node === null ? null : node.line;
  return found === null ? null : found + 1;
}
