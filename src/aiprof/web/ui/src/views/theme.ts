// Light and dark themes: the system's preference by default, a toggle that remembers.
const KEY = "aiprof-theme";

export function initTheme(button: HTMLElement): void {
  const saved = safeGet();
  if (saved === "dark" || saved === "light") document.documentElement.dataset.theme = saved;
  const label = () => {
    const dark = isDark();
    button.textContent = dark ? "☀" : "☾";
    button.title = dark ? "light theme" : "dark theme";
  };
  label();
  button.addEventListener("click", () => {
    const next = isDark() ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      localStorage.setItem(KEY, next);
    } catch {
      /* storage unavailable (file:// report): the toggle still works for this page */
    }
    label();
    window.dispatchEvent(new Event("resize"));
  });
  window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => {
    label();
    window.dispatchEvent(new Event("resize"));
  });
}

export function isDark(): boolean {
  const t = document.documentElement.dataset.theme;
  if (t) return t === "dark";
  return !!window.matchMedia?.("(prefers-color-scheme: dark)").matches;
}

function safeGet(): string | null {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;
  }
}
