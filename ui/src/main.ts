// Dashboard entry: sign-in from the one-time link, routing, theme.
import { api, setToken, signIn, token, whenSignedOut } from "./api";
import { h, mount } from "./dom";
import { empty, page } from "./ui";
import { overviewPage } from "./pages/overview";
import { eventsPage } from "./pages/events";
import { toolsPage } from "./pages/tools";
import { consentPage } from "./pages/consent";
import { clientsPage } from "./pages/clients";
import { secretsPage } from "./pages/secrets";
import { policyPage } from "./pages/policy";
import { sessionsPage } from "./pages/sessions";
import { safeNext } from "./next";

export type Cleanup = () => void;
export type Page = (main: HTMLElement, query: string) => Promise<Cleanup | void> | Cleanup | void;

const ROUTES: { path: string; label: string; render: Page }[] = [
  { path: "/overview", label: "Overview", render: overviewPage },
  { path: "/events", label: "Events", render: eventsPage },
  { path: "/tools", label: "Tools & pins", render: toolsPage },
  { path: "/consent", label: "Consent inbox", render: consentPage },
  { path: "/clients", label: "Clients", render: clientsPage },
  { path: "/secrets", label: "Secrets", render: secretsPage },
  { path: "/policy", label: "Policy", render: policyPage },
  { path: "/sessions", label: "Sessions", render: sessionsPage },
];

let cleanup: Cleanup | void = undefined;

function mainEl(): HTMLElement {
  return document.getElementById("main") as HTMLElement;
}

function renderNav(current: string): void {
  const nav = document.getElementById("nav");
  if (!nav) return;
  const signedIn = !!token();
  mount(
    nav,
    h(
      "ul",
      {},
      ...(signedIn ? ROUTES : []).map((r) =>
        h(
          "li",
          {},
          h("a", {
            href: r.path,
            text: r.label,
            attrs: r.path === current ? { "aria-current": "page" } : {},
            on: {
              click: (e: MouseEvent) => {
                if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
                e.preventDefault();
                navigate(r.path);
              },
            },
          }),
        ),
      ),
      signedIn
        ? h(
            "li",
            {},
            h("button", {
              type: "button",
              class: "ghost",
              text: "Sign out",
              on: {
                click: async () => {
                  try {
                    await api("/api/auth/signout", { method: "POST", body: {} });
                  } catch {
                    /* signed out either way */
                  }
                  setToken(null);
                  signedOut();
                },
              },
            }),
          )
        : null,
    ),
  );
}

export function navigate(path: string): void {
  history.pushState(null, "", path);
  void route();
}

function signedOut(): void {
  if (cleanup) cleanup();
  cleanup = undefined;
  renderNav("");
  mount(
    mainEl(),
    page(
      "Signed out",
      null,
      empty("You are not signed in to this dashboard.", "Run `gatehouse dashboard` in a terminal for a fresh one-time sign-in link (links work once, for 60 seconds)."),
    ),
  );
  document.title = "Signed out · Gatehouse";
}

async function route(): Promise<void> {
  if (cleanup) cleanup();
  cleanup = undefined;
  const main = mainEl();
  if (!token()) return signedOut();
  const path = location.pathname === "/" ? "/overview" : location.pathname;
  const r = ROUTES.find((x) => x.path === path) ?? ROUTES[0];
  renderNav(r.path);
  document.title = r.label + " · Gatehouse";
  mount(main, h("p", { class: "loading", text: "Loading…" }));
  try {
    cleanup = await r.render(main, location.search);
  } catch (e) {
    if (!token()) return signedOut();
    mount(main, page(r.label, null, h("div", { class: "error", attrs: { role: "alert" } }, e instanceof Error ? e.message : "Could not load this page.")));
  }
  main.focus({ preventScroll: true });
}

async function boot(): Promise<void> {
  applyTheme(localStorage.getItem("gatehouse.theme"));
  document.getElementById("theme")?.addEventListener("click", toggleTheme);
  whenSignedOut(signedOut);
  window.addEventListener("popstate", () => void route());
  if (location.pathname === "/signin") {
    const frag = new URLSearchParams(location.hash.slice(1));
    const t = frag.get("t");
    // Drop the one-time token from the address bar and history at once;
    // open the link's own route (`next=`) when it is one of ours.
    const routes = ROUTES.map((r) => r.path);
    history.replaceState(null, "", safeNext(frag.get("next"), routes));
    if (t) {
      try {
        await signIn(t);
      } catch {
        // Any page can navigate a tab here: a link that does not work
        // never signs a signed-in tab out.
        if (token()) {
          await route();
          return;
        }
        renderNav("");
        mount(
          mainEl(),
          page("Sign-in link not valid", null, empty("This sign-in link was already used or has expired.", "Run `gatehouse dashboard` for a fresh link; each link works once, within 60 seconds.")),
        );
        return;
      }
    }
  }
  await route();
}

function applyTheme(theme: string | null): void {
  const t = theme === "dark" || theme === "light" ? theme : matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  document.documentElement.dataset.theme = t;
  const btn = document.getElementById("theme");
  if (btn) {
    btn.textContent = t === "dark" ? "Light theme" : "Dark theme";
    btn.setAttribute("aria-label", "Switch to " + (t === "dark" ? "light" : "dark") + " theme");
  }
}

function toggleTheme(): void {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem("gatehouse.theme", next);
  applyTheme(next);
}

void boot();
