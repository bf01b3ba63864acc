import{b as n,c as r}from"./chunk-T5XN6TTV.js";var s=globalThis,a=n();s.onmessage=({data:{id:o,events:t}})=>{a.then(e=>s.postMessage({id:o,bad:r(e,t)}),e=>s.postMessage({id:o,error:String(e)}))};
