let n = 0;
document.getElementById("inc").addEventListener("click", () => {
  n += 1;
  document.getElementById("count").textContent = String(n);
});
document.getElementById("add").addEventListener("click", () => {
  const input = document.getElementById("new");
  if (!input.value) return;
  const li = document.createElement("li");
  li.textContent = input.value;
  document.getElementById("items").appendChild(li);
  input.value = "";
});
document.getElementById("clear").addEventListener("click", () => {
  document.getElementById("items").replaceChildren();
});
