import { h } from "../lib/dom";
import { formatHash, PAGES } from "../lib/url";
import { state } from "../state/app";

/** A clear page for an unknown profile or page (never another profile silently). */
export function notFoundPage(main: HTMLElement, what: "profile" | "page", name: string): void {
  main.append(h("div", { id: "not-found", class: "notfound" },
    h("h2", {}, what === "profile" ? `Profile not found: ${name}` : `Page not found: ${name}`),
    what === "profile"
      ? h("p", {}, "This server serves these profiles:")
      : h("p", {}, "The pages are: ", PAGES.join(", "), "."),
    what === "profile"
      ? h("ul", {}, state.profiles.map((p) => h("li", {}, p.status === "broken" ? `${p.name} (broken)` : h("a", { href: formatHash({ pid: p.id, page: "overview" }) }, p.name))))
      : h("p", {}, h("a", { href: formatHash({ pid: state.route.pid, page: "overview" }) }, "Go to the overview"))));
}
