// One floating tooltip for every chart and track: show(x, y, lines) at the pointer.
import { h } from "../lib/dom";

let tip: HTMLDivElement | null = null;

export function showTip(clientX: number, clientY: number, lines: (string | [string, string])[]): void {
  if (!tip) {
    tip = h("div", { id: "tip", role: "tooltip" });
    document.body.append(tip);
  }
  tip.textContent = "";
  for (const l of lines) {
    if (typeof l === "string") tip.append(h("div", { class: "tip-title" }, l));
    else tip.append(h("div", {}, h("span", { class: "muted" }, l[0] + " "), l[1]));
  }
  tip.style.display = "block";
  const r = tip.getBoundingClientRect();
  const x = clientX + 14 + r.width > window.innerWidth ? clientX - r.width - 10 : clientX + 14;
  const y = clientY + 16 + r.height > window.innerHeight ? clientY - r.height - 8 : clientY + 16;
  tip.style.left = Math.max(2, x) + "px";
  tip.style.top = Math.max(2, y) + "px";
}

export function hideTip(): void {
  if (tip) tip.style.display = "none";
}
