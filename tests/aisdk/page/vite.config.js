import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// /api goes to `tplog serve` (TPLOG_URL, default http://localhost:8000): the page and the chat API share an origin.
const api = { "/api": process.env.TPLOG_URL ?? "http://localhost:8000" };

export default defineConfig({ plugins: [react()], server: { proxy: api }, preview: { proxy: api } });
