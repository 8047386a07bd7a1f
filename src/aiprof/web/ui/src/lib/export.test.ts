import { describe, expect, it } from "vitest";
import { csvField, toCsv } from "./export";

describe("toCsv", () => {
  it("quotes what needs quoting and keeps raw values", () => {
    const csv = toCsv({
      columns: [{ name: "name" }, { name: "total_us" }, { name: "args" }],
      rows: [
        { name: 'gemm "a", b', total_us: 1234.5, args: null },
        { name: "line\nbreak", total_us: 0, args: { x: 1 } },
      ],
    });
    expect(csv).toBe('name,total_us,args\r\n"gemm ""a"", b",1234.5,\r\n"line\nbreak",0,"{""x"":1}"\r\n');
  });
  it("leaves plain fields alone", () => {
    expect(csvField("abc")).toBe("abc");
    expect(csvField(undefined)).toBe("");
  });
});
