/**
 * The dashboard's only assets, shipped in the package as strings (nothing from a CDN): one
 * style sheet and one small script (confirmations and auto-refresh). Pages work without it.
 * Every state of JOB_STATES has its colour (`--<state>`, `.s-<state>`) and its card.
 */
import { JOB_STATES } from '../core/job-state';

export const STYLES = `
:root{--bg:#f6f7f9;--panel:#fff;--ink:#1d2330;--muted:#667085;--line:#e4e7ec;--accent:#3b5bdb;--nav:#161b26;
--blocked:#0e7490;--waiting:#3b82f6;--scheduled:#64748b;--running:#7c3aed;--retrying:#d97706;--completed:#16a34a;--failed:#dc2626;--cancelled:#6b7280}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
header.top{background:var(--nav);color:#fff;display:flex;align-items:center;gap:28px;padding:0 28px;height:52px}
header.top .brand{font-weight:650;letter-spacing:.2px;color:#fff}
header.top nav{display:flex;gap:4px}
header.top nav a{color:#c7cbd6;padding:6px 12px;border-radius:6px}
header.top nav a.on,header.top nav a:hover{background:#2a3142;color:#fff;text-decoration:none}
header.top .right{margin-left:auto;display:flex;align-items:center;gap:14px;color:#9aa1b1;font-size:12.5px}
header.top label{display:flex;gap:6px;align-items:center;cursor:pointer;color:#c7cbd6}
main{max-width:1380px;margin:0 auto;padding:22px 28px 48px}
h1{font-size:20px;margin:0 0 16px;font-weight:650;display:flex;align-items:center;gap:10px}
h2{font-size:14px;margin:0 0 10px;font-weight:650;color:#344054;text-transform:uppercase;letter-spacing:.5px}
.panel{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin-bottom:18px}
.grid{display:grid;gap:18px}.grid.two{grid-template-columns:1fr 1fr}.grid.side{grid-template-columns:2fr 1fr}
.cards{display:grid;grid-template-columns:repeat(${JOB_STATES.length},1fr);gap:12px;margin-bottom:18px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:12px 14px;border-top:3px solid var(--c);color:var(--ink)}
.card:hover{text-decoration:none;border-color:var(--c)}
.card .n{font-size:24px;font-weight:650;font-variant-numeric:tabular-nums}.card .l{color:var(--muted);font-size:12.5px;text-transform:capitalize}
table{width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}
th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.4px;padding:8px 10px;border-bottom:1px solid var(--line);white-space:nowrap}
td{padding:8px 10px;border-bottom:1px solid #f0f2f5;vertical-align:middle}
tr:last-child td{border-bottom:0}tbody tr:hover{background:#fafbfc}
td.num,th.num{text-align:right}td.err{color:#b42318;max-width:460px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.zero{color:#c0c5cf}
.badge{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;font-weight:600;color:#fff;background:var(--c);text-transform:capitalize;white-space:nowrap}
.s-blocked{--c:var(--blocked)}.s-waiting{--c:var(--waiting)}.s-scheduled{--c:var(--scheduled)}.s-running{--c:var(--running)}.s-retrying{--c:var(--retrying)}
.s-completed{--c:var(--completed)}.s-failed{--c:var(--failed)}.s-cancelled{--c:var(--cancelled)}
.s-active{--c:var(--completed)}.s-paused{--c:var(--retrying)}.s-held{--c:var(--scheduled)}
form.limits{display:flex;flex-wrap:wrap;gap:6px 8px;align-items:center;margin:0;max-width:31em}form.limits label{display:flex;gap:4px;align-items:center;white-space:nowrap}form.limits input{font:inherit;padding:2px 4px;width:4.5em;min-width:0}td.actions{flex-wrap:wrap}
.muted{color:var(--muted)}.mono,code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#0f1420;color:#e6e9ef;border-radius:8px;padding:12px 14px;overflow:auto;max-height:360px;margin:0;white-space:pre-wrap;word-break:break-word}
form.filters{display:flex;gap:10px;flex-wrap:wrap;align-items:end;margin-bottom:14px}
form.filters label{display:flex;flex-direction:column;gap:4px;font-size:12px;color:var(--muted)}
input[type=checkbox]{min-width:0;margin:0}
input,select{font:inherit;padding:6px 9px;border:1px solid #d0d5dd;border-radius:7px;background:#fff;min-width:150px}
button,.button{font:inherit;font-weight:600;padding:6px 14px;border-radius:7px;border:1px solid #d0d5dd;background:#fff;color:var(--ink);cursor:pointer}
button.primary{background:var(--accent);border-color:var(--accent);color:#fff}button.danger{color:#b42318;border-color:#fda29b}
button:hover{filter:brightness(.96)}
.actions{display:flex;gap:8px;margin-left:auto}.actions form{margin:0}h1 .actions button{font-size:14px}
.progress-line{display:flex;align-items:center;gap:10px}
dl.facts{display:grid;grid-template-columns:150px 1fr;gap:7px 14px;margin:0}dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.bar{height:8px;background:#eef0f4;border-radius:99px;overflow:hidden;min-width:160px}.bar i{display:block;height:100%;background:var(--running)}
.flash{padding:10px 14px;border-radius:8px;margin-bottom:16px;background:#ecfdf3;color:#067647;border:1px solid #abefc6}
.flash.error{background:#fef3f2;color:#b42318;border-color:#fecdca}
.pager{display:flex;justify-content:flex-end;margin-top:12px}
.chart svg{width:100%;height:190px;display:block}.legend{display:flex;gap:14px;font-size:12px;color:var(--muted);margin-top:6px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.empty{color:var(--muted);padding:18px 4px;text-align:center}
.flow-summary{display:flex;flex-wrap:wrap;align-items:center;gap:8px;margin:-6px 0 16px}
.graph{overflow:auto}.graph svg{display:block}
.graph .box{fill:#fff;stroke:var(--line)}.graph a:hover .box{stroke:var(--accent)}.graph .stripe{fill:var(--c)}
.graph text{font-size:12.5px;fill:var(--ink)}.graph .ref{font-weight:650}.graph .state{fill:var(--c);font-weight:600;font-size:11.5px}
.graph .sub{fill:var(--muted);font-size:11.5px;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.graph .edge{fill:none;stroke:var(--c,#98a2b3);stroke-width:1.6}.graph .head{fill:var(--c,#98a2b3)}.graph .pending .edge{stroke-dasharray:5 4}
tr.group th{background:#f9fafb;text-transform:none;letter-spacing:0;padding-top:10px}
`;

export const SCRIPT = `
document.addEventListener('submit', function (e) {
  var message = e.target.getAttribute('data-confirm');
  if (message && !window.confirm(message)) e.preventDefault();
});
(function () {
  var box = document.getElementById('autorefresh');
  if (!box) return;
  box.checked = localStorage.getItem('jq-autorefresh') !== 'off';
  box.addEventListener('change', function () { localStorage.setItem('jq-autorefresh', box.checked ? 'on' : 'off'); });
  setInterval(function () { if (box.checked && !document.hidden) location.reload(); }, 5000);
})();
`;
