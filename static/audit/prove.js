// "Prove this event", checked in the browser: the entry's leaf hash, SHA-256(0x00 || entry),
// folded with the RFC 9162 inclusion proof (section 2.1.3.2) must give the Merkle root the
// checkpoint signs (its third line). The checkpoint's Ed25519 signature and the witnesses'
// cosignatures are checked by tlog_verify.py offline (and by Kiln on this page).
(function () {
  "use strict";
  const out = document.getElementById("proof-browser");
  const data = document.getElementById("proof-bundle");
  if (!out || !data) return;

  function show(ok, text) {
    out.textContent = "";
    const badge = document.createElement("span");
    badge.className = ok ? "badge ok" : "badge bad";
    badge.textContent = ok ? "verified" : "not verified";
    out.append(badge, " " + text);
  }

  function fromBase64(text) {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  }

  async function sha256(...parts) {
    const size = parts.reduce((n, p) => n + p.length, 0);
    const joined = new Uint8Array(size);
    let at = 0;
    for (const p of parts) {
      joined.set(p, at);
      at += p.length;
    }
    return new Uint8Array(await crypto.subtle.digest("SHA-256", joined));
  }

  async function rootOf(index, size, leaf, proof) {
    let fn = index;
    let sn = size - 1;
    let r = leaf;
    for (const p of proof) {
      if (sn === 0) throw new Error("the proof is longer than the tree is deep");
      if (fn % 2 === 1 || fn === sn) {
        r = await sha256(Uint8Array.of(1), p, r);
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      } else {
        r = await sha256(Uint8Array.of(1), r, p);
      }
      fn = Math.floor(fn / 2);
      sn = Math.floor(sn / 2);
    }
    if (sn !== 0) throw new Error("the proof is shorter than the tree is deep");
    return r;
  }

  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

  async function check() {
    if (!window.crypto || !crypto.subtle) {
      out.innerHTML = '<span class="badge muted">not here</span> this page is not served over https, so the browser offers no SHA-256: verify offline below';
      return;
    }
    const bundle = JSON.parse(data.textContent);
    const lines = bundle.checkpoint.split("\n");
    const size = Number(lines[1]);
    const signedRoot = fromBase64(lines[2]);
    if (JSON.parse(bundle.entry).seq !== bundle.index + 1) {
      show(false, "the entry's seq is not its index + 1");
      return;
    }
    const leaf = await sha256(Uint8Array.of(0), new TextEncoder().encode(bundle.entry));
    const root = await rootOf(bundle.index, size, leaf, bundle.proof.map(fromBase64));
    if (same(root, signedRoot)) {
      show(true, `the entry and ${bundle.proof.length} hashes lead to the root the checkpoint of size ${size} signs`);
    } else {
      show(false, `the proof does not lead to the root the checkpoint of size ${size} signs`);
    }
  }

  check().catch((err) => show(false, err.message));
})();
