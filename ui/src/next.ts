// Where to go after sign-in: the link's `next=` route, only when it is a
// same-origin relative path to one of the dashboard's own pages.

/** `next` as path + query when it is safe, else `fallback`. */
export function safeNext(next: string | null, routes: readonly string[], fallback = "/overview"): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || /[\\\u0000-\u001f\u007f]/.test(next)) return fallback;
  let url: URL;
  try {
    url = new URL(next, "http://gatehouse.invalid");
  } catch {
    return fallback;
  }
  if (url.origin !== "http://gatehouse.invalid" || !routes.includes(url.pathname)) return fallback;
  return url.pathname + url.search;
}
