import { api } from "../api";
import { h, mount } from "../dom";
import { announce, errorBox, field, page } from "../ui";

interface Diag {
  file: string;
  line: number;
  column: number;
  message: string;
}
interface PolicyResp {
  text: string;
  valid: boolean;
  exists: boolean;
  sha256: string;
  path: string;
  diagnostics: Diag[];
  warnings: Diag[];
}

export async function policyPage(main: HTMLElement): Promise<void> {
  const p = await api<PolicyResp>("/api/policy");
  let base = p.sha256;
  const editor = h("textarea", { name: "policy", spellcheck: false, rows: 24, value: p.text });
  const out = h("div", { attrs: { role: "status", "aria-live": "polite" } });
  const showDiags = (valid: boolean, diags: Diag[], warnings: Diag[], ok: string) => {
    mount(
      out,
      valid ? h("p", { class: "ok", text: ok }) : h("p", { class: "error", text: "The policy is not valid:" }),
      diags.length || warnings.length
        ? h("ul", { class: "diags" }, ...[...diags, ...warnings].map((d) => h("li", {}, h("code", { text: `${d.file}:${d.line}:${d.column}` }), " ", d.message)))
        : null,
    );
  };
  const validate = async () => {
    try {
      const r = await api<{ valid: boolean; diagnostics: Diag[]; warnings: Diag[] }>("/api/policy/validate", { method: "POST", body: { text: editor.value } });
      showDiags(r.valid, r.diagnostics, r.warnings, "The policy is valid.");
    } catch (e) {
      mount(out, errorBox(e));
    }
  };
  const save = async () => {
    try {
      const r = await api<{ saved: boolean; valid: boolean; sha256?: string; diagnostics?: Diag[]; warnings?: Diag[] }>("/api/policy", { method: "PUT", body: { text: editor.value, base_sha256: base } });
      if (r.saved && r.sha256) base = r.sha256;
      showDiags(r.valid, r.diagnostics ?? [], r.warnings ?? [], r.saved ? "Saved. Wrapped servers pick it up on their next check." : "Not saved.");
      if (r.saved) announce("Policy saved.");
    } catch (e) {
      mount(out, errorBox(e));
    }
  };
  const generate = async () => {
    try {
      const r = await api<{ text: string }>("/api/policy/generate", { method: "POST", body: {} });
      editor.value = r.text;
      mount(out, h("p", { class: "warn", text: "Generated a locked-down policy from what was observed. Review it (blocked tools are commented out), then Save." }));
    } catch (e) {
      mount(out, errorBox(e));
    }
  };
  mount(
    main,
    page(
      "Policy",
      null,
      h("p", { class: "intro" }, p.exists ? "Editing " : "No policy file yet; this is the default. Saving creates ", h("code", { text: p.path }), "."),
      field("policy.toml", editor),
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "button", text: "Validate", on: { click: () => void validate() } }),
        h("button", { type: "button", class: "primary", text: "Save", on: { click: () => void save() } }),
        h("button", { type: "button", class: "ghost", text: "Generate from observed", on: { click: () => void generate() } }),
      ),
      out,
    ),
  );
  showDiags(p.valid, p.diagnostics, p.warnings, "The current policy is valid.");
}
